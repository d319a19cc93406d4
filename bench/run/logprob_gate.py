"""The log-probability comparison behind the correctness gate: a candidate's greedy decode against the
reference's, prompt by prompt, where the two runs still saw the same context, judged against a null.

Two correct all-reduces that add the same partial sums in another order give bf16 results that differ in
the last bits; at a near-tie greedy decoding then picks the other token and the texts part ways. So the
texts alone cannot tell a correct reordering from a broken reduction. What tells them apart is how far the
chosen token's log-probability moves over the common prefix (every position before the first divergence,
where both runs saw the same tokens): its mean and its 99th percentile, and, at each first divergence, the
gap between the two tokens. On a mixture-of-experts model a last-bit change can swap an expert a token is
routed to, so a correct reordering moves single tokens far (0.5 nats) and a fixed constant calibrated on a
dense model fails it; the scale of the moves also grows with the model's depth.

So the limits come from a NULL measured on the host: the reference against itself at another batch size
(requests sharing a forward round differently), which moves log-probabilities the way a correct reordering
does. A candidate FAILs when a statistic is more than `null_factor` times the null's and above the
calibrated floor (what correct reorderings reach on a batch-invariant dense model, where the null can be
zero). Without a null, or where the null itself is out of the calibrated range, the calibrated limits
stand (`NO_NULL`: what every correct variant of the calibration stayed under), and the verdict says so.
A KIT_GATE_* setting, where set, replaces the derived limit of its statistic. The maximum change alone is
reported, not judged, unless KIT_GATE_MAX_DELTA is set. `docs/bench.md` "The correctness gate" has the
calibration (docs/evidence/logprob-gate/), the figures and the detection limit.

Standard library only: tools/gpu/numerics_calibration.py and tools/gate_calibration.py use this module to
compute the same statistics that the bench gates on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from bench.bundle.verdicts import FAIL, NOT_ENOUGH, PASS
from bench.client.logprob_rows import TokenLogprob


@dataclass(frozen=True)
class Limits:
    """A limit for each judged statistic, in nats."""

    mean_delta: float  # the mean chosen-token change on the common prefix
    p99_delta: float  # its 99th percentile
    max_flip_gap: float  # the largest log-probability gap at a first divergence (a near-tie is small)


# Calibrated on one H200 (docs/evidence/logprob-gate/: dense and mixture-of-experts models at 8 and 24 layers,
# 5 prompt sets each; tools/gate_calibration.py judges them, tests/bench/run/test_logprob_gate.py checks these
# values against its committed output).
# FLOOR: what the limits start from before the null is added: between the most the correct orders of the dense
# models reached (null zero: their decode does not depend on the batch) and the least the broken ones reached.
# The flip gap's limit is FLOOR's alone: a near-tie stays a near-tie, whatever the null.
FLOOR = Limits(mean_delta=0.0055, p99_delta=0.042, max_flip_gap=1.15)
# NO_NULL: the limits without a usable null: the most any correct variant of the calibration reached, with 10%
# room. A null past them (the reference moves more against itself than any correct variant moved against its
# reference) judges nothing: the reference itself is suspect, or the model is outside the calibration.
NO_NULL = Limits(mean_delta=0.0142, p99_delta=0.125, max_flip_gap=1.15)
# Fewer compared tokens than this and the 99th percentile is the few largest moves, one routing flip on a MoE:
# it is reported, not judged (the mean, the flip gap and the top-k still are).
P99_MIN_TOKENS = 500
# What the calibration shows the gate catches with the null's limits (tools/gate_calibration.py, 128 prompts).
DETECTION_LIMIT = ("caught at 128 prompts, every seed: one rank's buffer with 1 row in 64 stale (all four models; "
                   "1 row in 512 on the dense ones and the 8-layer MoE), another request's rows in 1 all-reduce of "
                   "100 (dense, 8-layer MoE; 2 seeds of 3 at 24 layers), a partial dropped or added twice in 1 "
                   "all-reduce of 200 (dense only: on a mixture-of-experts model it moves log-probabilities no more "
                   "than a correct reordering, 1 seed of 3 caught); rarer faults (1 in 1000) are not seen: the exact "
                   "all-reduce check (bench allreduce) is what proves a backend")


@dataclass(frozen=True)
class Thresholds:
    """How the gate judges: named settings (launcher/settings.py KIT_GATE_*). `null_factor` scales the null;
    each fixed limit, where set, replaces the derived one of its statistic; `max_delta` is judged only when
    set."""

    null_factor: float
    mean_delta: float | None
    p99_delta: float | None
    max_flip_gap: float | None
    max_delta: float | None
    min_tokens: int  # fewer common-prefix tokens than this is not enough evidence for a PASS
    top_k: int  # how many alternatives the correctness pass asks for, and a flip's tokens are looked up in


def thresholds(environ: Mapping[str, str] | None = None) -> Thresholds:
    """The thresholds the settings name; SettingError (exit 2) naming a bad one."""
    from launcher import settings  # standard library only, like this module

    return Thresholds(settings.KIT_GATE_NULL_FACTOR.get(environ), settings.KIT_GATE_MEAN_DELTA.get(environ),
                      settings.KIT_GATE_P99_DELTA.get(environ), settings.KIT_GATE_MAX_FLIP_GAP.get(environ),
                      settings.KIT_GATE_MAX_DELTA.get(environ), settings.KIT_GATE_MIN_TOKENS.get(environ),
                      settings.KIT_GATE_TOP_K.get(environ))


@dataclass(frozen=True)
class Flip:
    """The first divergence of one prompt."""

    position: int
    reference_token: int | str
    candidate_token: int | str
    in_reference_top: bool  # the candidate's token is in the reference's top-k there
    in_candidate_top: bool  # and the reference's in the candidate's
    gap: float | None  # reference's log-probability of its token minus of the candidate's (None: not in its top-k)

    @property
    def hard(self) -> bool:
        return not (self.in_reference_top and self.in_candidate_top)


@dataclass(frozen=True)
class PromptComparison:
    prompt_id: str
    deltas: tuple[float, ...]  # |candidate - reference| chosen-token log-probability, common prefix
    flip: Flip | None  # None: the decodes agree to the shorter one's end


@dataclass(frozen=True)
class GateStats:
    prompts: int
    tokens: int  # common-prefix positions compared
    exact_match_rate: float | None  # token-level: decodes equal to the shorter one's end
    median_first_divergence: float | None  # over the prompts that diverged
    p50_delta: float | None
    p99_delta: float | None
    max_delta: float | None
    flips: int
    hard_mismatches: int
    max_flip_gap: float | None
    missing: int = 0  # prompts without log-probabilities on one side
    mean_delta: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> GateStats:
        """What `as_dict` wrote (a bundle's or a calibration's statistics)."""
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})  # type: ignore[arg-type]

    def value(self, name: str) -> float | None:
        return getattr(self, name)


def _top(row: TokenLogprob, k: int) -> dict[int, float]:
    items = sorted(row.top.items(), key=lambda kv: -kv[1])[:k]
    return dict(items)


def compare_prompt(prompt_id: str, reference: Sequence[TokenLogprob], candidate: Sequence[TokenLogprob],
                   top_k: int) -> PromptComparison:
    """The common prefix's log-probability changes and the first divergence of one prompt."""
    deltas: list[float] = []
    for i, (r, c) in enumerate(zip(reference, candidate, strict=False)):
        if r.token_id != c.token_id:
            r_top, c_top = _top(r, top_k), _top(c, top_k)
            gap = r.logprob - r_top[c.token_id] if c.token_id in r_top else None
            flip = Flip(i, r.token_id, c.token_id, c.token_id in r_top, r.token_id in c_top, gap)
            return PromptComparison(prompt_id, tuple(deltas), flip)
        deltas.append(abs(c.logprob - r.logprob))
    return PromptComparison(prompt_id, tuple(deltas), None)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def compare(reference: Mapping[str, Sequence[TokenLogprob] | None],
            candidate: Mapping[str, Sequence[TokenLogprob] | None], top_k: int) -> GateStats:
    """The gate's statistics over the prompts both runs have. A prompt whose log-probabilities are
    missing on either side (None or empty) is counted in `missing` and compared no further."""
    common = [k for k in reference if k in candidate]
    rows: list[PromptComparison] = []
    missing = 0
    for k in common:
        ref, cand = reference[k], candidate[k]
        if not ref or not cand:
            missing += 1
            continue
        rows.append(compare_prompt(k, ref, cand, top_k))
    deltas = [d for r in rows for d in r.deltas]
    flips = [r.flip for r in rows if r.flip is not None]
    gaps = [f.gap for f in flips if f.gap is not None]
    return GateStats(
        prompts=len(rows),
        tokens=len(deltas),
        exact_match_rate=(len(rows) - len(flips)) / len(rows) if rows else None,
        median_first_divergence=quantile([f.position for f in flips], 0.5),
        p50_delta=quantile(deltas, 0.5),
        p99_delta=quantile(deltas, 0.99),
        max_delta=max(deltas) if deltas else None,
        flips=len(flips),
        hard_mismatches=sum(f.hard for f in flips),
        max_flip_gap=max(gaps) if gaps else None,
        missing=missing,
        mean_delta=sum(deltas) / len(deltas) if deltas else None,
    )


JUDGED = tuple(Limits.__dataclass_fields__)  # the statistics a limit applies to, in the order reasons name them
SETTING_OF = {"mean_delta": "KIT_GATE_MEAN_DELTA", "p99_delta": "KIT_GATE_P99_DELTA",
              "max_flip_gap": "KIT_GATE_MAX_FLIP_GAP"}


@dataclass(frozen=True)
class Null:
    """What the reference shows against itself: `label` says which runs (e.g. "baseline+eagle3 at concurrency
    1 against 8"), `stats` their comparison."""

    label: str
    stats: GateStats


@dataclass(frozen=True)
class Tolerance:
    """The limits one verdict applies and where each comes from."""

    limits: Limits
    max_delta: float | None  # judged only when set
    basis: str  # "null", "calibrated (no null)", "calibrated (the null is out of range)"; then each setting set
    null: Null | None
    notes: tuple[str, ...] = ()
    suspect: bool = False  # the null is out of the calibrated range: no limit can be trusted

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self.limits), "max_delta": self.max_delta, "basis": self.basis,
                "null": None if self.null is None else {"label": self.null.label, **self.null.stats.as_dict()},
                "notes": list(self.notes), "suspect": self.suspect, "detection_limit": DETECTION_LIMIT}


def tolerance(t: Thresholds, null: Null | None) -> Tolerance:
    """The limits for a verdict: FLOOR plus `null_factor` x the null's mean and p99 change (the flip gap: FLOOR's);
    NO_NULL without a null or with one of too few tokens; none at all (`suspect`) when the null is past NO_NULL.
    A set KIT_GATE_* limit replaces its statistic's in every case."""
    notes: list[str] = []
    usable = null is not None and null.stats.tokens >= t.min_tokens
    if null is not None and not usable:
        notes.append(f"null {null.label}: {null.stats.tokens} tokens compared, {t.min_tokens} needed; "
                     "calibrated limits without a null used")
    suspect = False
    if usable and null is not None:
        wild = [k for k in ("mean_delta", "p99_delta") if (null.stats.value(k) or 0.0) > getattr(NO_NULL, k)]
        if wild:
            suspect = True
            notes.append(f"null {null.label}: the reference moves more against itself than any correct variant of "
                         f"the calibration moved ({', '.join(f'{k} {null.stats.value(k):.4f}' for k in wild)}): check "
                         "the reference itself (a fault that shows only in batches?), or set KIT_GATE_MEAN_DELTA and "
                         "KIT_GATE_P99_DELTA for this model")
    limits = {}
    for k in JUDGED:
        if usable and null is not None and k != "max_flip_gap":
            limits[k] = getattr(FLOOR, k) + t.null_factor * (null.stats.value(k) or 0.0)
        else:
            limits[k] = getattr(NO_NULL if not usable else FLOOR, k)
    basis = "null" if usable else "calibrated (no null)"
    fixed = [k for k in JUDGED if getattr(t, k) is not None]
    for k in fixed:
        limits[k] = getattr(t, k)
    if suspect and {"mean_delta", "p99_delta"} <= set(fixed):
        suspect = False
    if suspect:
        basis = "none (the null is out of the calibrated range)"
    if fixed:
        basis += ", " + ", ".join(f"{SETTING_OF[k]} set" for k in fixed)
    return Tolerance(Limits(**limits), t.max_delta, basis, null if usable else None, tuple(notes), suspect)


def verdict(stats: GateStats, thresholds: Thresholds, tol: Tolerance | None = None) -> tuple[str, list[str]]:
    """PASS, FAIL or 'not enough evidence', with the reasons. Any failing statistic is a FAIL however few
    tokens it rests on (the p99 from P99_MIN_TOKENS on); a PASS needs at least `min_tokens` common-prefix
    tokens. `tol`: the limits (default: without a null)."""
    t = thresholds
    tol = tol or tolerance(t, None)
    lim = tol.limits
    scale = (f" (the floor + {t.null_factor:g}x the null: {tol.null.label})" if tol.null is not None
             else f" ({tol.basis})")
    reasons: list[str] = []
    if stats.mean_delta is not None and stats.mean_delta > lim.mean_delta:
        reasons.append(f"mean log-probability change {stats.mean_delta:.4f} nats on the common prefix "
                       f"> {lim.mean_delta:.4f}{scale}")
    if stats.p99_delta is not None and stats.tokens >= P99_MIN_TOKENS and stats.p99_delta > lim.p99_delta:
        reasons.append(f"p99 log-probability change {stats.p99_delta:.3f} nats > {lim.p99_delta:.3f}{scale}")
    if tol.max_delta is not None and stats.max_delta is not None and stats.max_delta > tol.max_delta:
        reasons.append(f"a chosen token's log-probability moved by {stats.max_delta:.3f} nats on the common prefix "
                       f"(> KIT_GATE_MAX_DELTA {tol.max_delta})")
    if stats.hard_mismatches:
        reasons.append(f"{stats.hard_mismatches} first divergence(s) chose a token outside the other's top-{t.top_k}")
    if stats.max_flip_gap is not None and stats.max_flip_gap > lim.max_flip_gap:
        reasons.append(f"a first divergence was no near-tie: log-probability gap {stats.max_flip_gap:.3f} nats "
                       f"> {lim.max_flip_gap:.3f}{scale}")
    if tol.suspect:  # no limit holds; a token outside the other's top-k is wrong whatever the scale
        hard = [r for r in reasons if "outside the other's top" in r]
        return (FAIL, hard) if hard else (NOT_ENOUGH, [n for n in tol.notes if "moves more against itself" in n])
    if reasons:
        return FAIL, reasons
    if stats.tokens < t.min_tokens:
        why = f"{stats.tokens} common-prefix tokens compared, {t.min_tokens} needed"
        if stats.missing:
            why += f"; {stats.missing} prompt(s) came without usable log-probabilities (the server did not return them, or sent them malformed)"
        return NOT_ENOUGH, [why]
    return PASS, []
