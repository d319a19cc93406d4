"""The log-probability comparison behind the correctness gate: a candidate's greedy decode against the
reference's, prompt by prompt, where the two runs still saw the same context.

Two correct all-reduces that add the same partial sums in another order give bf16 results that differ in
the last bits; at a near-tie greedy decoding then picks the other token and the texts part ways. So the
texts alone cannot tell a correct reordering from a broken reduction. What does tell them apart is how far
the chosen token's log-probability moves over the common prefix (every position before the first
divergence, where both runs saw the same tokens): a reordering moves it by rounding noise, a reduction that
drops, repeats or reads stale partial sums moves it by far more (docs/bench.md, "The correctness gate", has
the calibration and the command that made it).

At the first divergence itself, a benign flip is a near-tie: each side's token is in the other's top-k and
the reference's log-probabilities of the two tokens are close. A token outside the other's top-k, or a flip
whose gap is larger than a reordering can produce, is a hard mismatch.

Standard library only: tools/gpu/numerics_calibration.py imports this module on a GPU machine to compute
the same statistics that the bench gates on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PASS = "PASS"
FAIL = "FAIL"
NOT_ENOUGH = "not enough evidence"


@dataclass(frozen=True)
class TokenLogprob:
    """One generated position: the chosen token, its log-probability, and the top alternatives
    (token id -> log-probability) the server returned there."""

    token_id: int | str  # an id (/generate), or the token text (the chat API names tokens so)
    logprob: float
    top: Mapping[int | str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Thresholds:
    """When a candidate fails: named settings (launcher/settings.py KIT_GATE_*), whose defaults sit at the
    geometric mean of the largest value a correct reordering reached and the smallest a broken reduction
    reached in the calibration under docs/evidence/logprob-gate/ (tools/gpu/numerics_calibration.py on one
    H200). A real model at TP 8 does more reductions per token; recalibrate on it before tightening them."""

    max_delta: float  # nats: the largest chosen-token change on the common prefix
    p99_delta: float  # nats: its 99th percentile
    max_flip_gap: float  # nats: the largest log-probability gap at a first divergence (a near-tie is small)
    min_tokens: int  # fewer common-prefix tokens than this is not enough evidence for a PASS
    top_k: int  # how many alternatives the correctness pass asks for, and a flip's tokens are looked up in


def thresholds(environ: Mapping[str, str] | None = None) -> Thresholds:
    """The thresholds the settings name; SettingError (exit 2) naming a bad one."""
    from launcher import settings  # standard library only, like this module

    return Thresholds(settings.KIT_GATE_MAX_DELTA.get(environ), settings.KIT_GATE_P99_DELTA.get(environ),
                      settings.KIT_GATE_MAX_FLIP_GAP.get(environ), settings.KIT_GATE_MIN_TOKENS.get(environ),
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

    def as_dict(self) -> dict[str, float | int | None]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


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
    )


def verdict(stats: GateStats, thresholds: Thresholds) -> tuple[str, list[str]]:
    """PASS, FAIL or 'not enough evidence', with the reasons. Any failing statistic is a FAIL however few
    tokens it rests on; a PASS needs at least `min_tokens` common-prefix tokens."""
    t = thresholds
    reasons: list[str] = []
    if stats.max_delta is not None and stats.max_delta > t.max_delta:
        reasons.append(f"a chosen token's log-probability moved by {stats.max_delta:.3f} nats on the common prefix "
                       f"(> {t.max_delta} allowed: more than a reordered sum moves it)")
    if stats.p99_delta is not None and stats.p99_delta > t.p99_delta:
        reasons.append(f"p99 log-probability change {stats.p99_delta:.3f} nats > {t.p99_delta}")
    if stats.hard_mismatches:
        reasons.append(f"{stats.hard_mismatches} first divergence(s) chose a token outside the other's top-{t.top_k}")
    if stats.max_flip_gap is not None and stats.max_flip_gap > t.max_flip_gap:
        reasons.append(f"a first divergence was no near-tie: log-probability gap {stats.max_flip_gap:.3f} nats "
                       f"> {t.max_flip_gap}")
    if reasons:
        return FAIL, reasons
    if stats.tokens < t.min_tokens:
        why = f"{stats.tokens} common-prefix tokens compared, {t.min_tokens} needed"
        if stats.missing:
            why += f"; {stats.missing} prompt(s) came without log-probabilities (the server did not return them)"
        return NOT_ENOUGH, [why]
    return PASS, []
