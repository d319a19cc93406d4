"""Correctness gate: a fast profile whose numerics are broken (or that kills acceptance) is a FAIL, and one
that only sums in another order is not.

Each (profile, spec[, EAGLE-3 point]) is compared with its reference, the `baseline` profile under the same
spec mode, prompt by prompt, on its correctness pass (bench/run/passes.py: one untimed greedy reply per prompt
with every token's log-probability and its top alternatives, at concurrency 1 and the highest level measured,
and under eagle3-adaptive at a level in each tier the levels reach):

* the verdict (bench/run/logprob_gate.py), at each level against the reference at the same level: over the
  tokens before each prompt's first divergence, where both runs saw the same text, the mean and p99 of how far
  the chosen token's log-probability moved, and at the first divergence whether the two tokens were a near-tie.
  The limits scale with the null: the reference against itself at its lowest and highest level. PASS, FAIL, or
  "not enough evidence" when too few tokens could be compared, the server sent no log-probabilities, or a prompt's
  reply at that level has none that can be used (malformed: bench/client/logprob_rows.py; the reason names the prompt and
  the field), since that prompt could be the one that fails (never a PASS then). A FAIL at any level is a FAIL;
* accept length under speculation: FAIL when it collapses, at most `min_accept` (about 1.0 means every draft
  token is rejected, the signature of a wrong all-reduce), or below `collapse_ratio` x the reference's at the
  SAME EAGLE-3 point (a (1,1,2) point accepts at most 2 tokens a pass, so against a (3,1,4) reference it is
  not judged: the reason is written in `accept_note`). Not under eagle3-adaptive (ADAPTIVE_ACCEPT): there a
  correct plan reads 1.0 wherever a tier runs 0 steps, so only the log-probabilities judge it;
* exact match and first divergence of the texts, as information only: two correct all-reduces that add the
  same partial sums in another order round differently in bf16, greedy decoding then flips at near-ties, and
  the texts part ways (docs/evidence.md "Reduction order and greedy text"). The first divergence is a
  CHARACTER index of the generated text, the same for /generate and the chat API.

Without a reference run for that spec the status is "n/a (no baseline)", unless the absolute accept-length
rule already fails it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from bench import JsonObject
from bench.bundle.schema import ADAPTIVE_ACCEPT, TEXTS_DIFFER, Correctness
from bench.client.request_record import RequestRecord
from bench.run import logprob_gate, passes
from bench.run.logprob_gate import Thresholds, TokenLogprob
from bench.run.passes import Reply
from launcher.errors import UserError
from launcher.profiles.adaptive_tiers import SPEC_MODE as ADAPTIVE
from launcher.profiles.spec_params import SpecParams

BASELINE = "baseline"
UNIT = "character"
NO_LOGPROBS = "the server returned no log-probabilities"

Logprobs = Mapping[str, Sequence[TokenLogprob] | None]
Point = SpecParams  # an EAGLE-3 point


@dataclass(frozen=True)
class GateSettings:
    collapse_ratio: float = 0.6
    min_accept: float = 1.05

    def as_dict(self, thresholds: Thresholds) -> dict[str, float | int | None]:
        """What the manifest records of the gate: these and the log-probability thresholds."""
        return {**asdict(self), **asdict(thresholds)}


def check_workload(num_prompts: int, max_tokens: int, t: Thresholds) -> None:
    """UserError (exit 2, before anything is switched) when the workload cannot reach the gate's minimum evidence:
    every token of every prompt compared is `num_prompts` x `max_tokens`, the most a pass can compare."""
    most = num_prompts * max_tokens
    if most < t.min_tokens:
        raise UserError(f"--num-prompts {num_prompts} x --max-tokens {max_tokens} = {most} tokens: the correctness gate "
                        f"needs at least {t.min_tokens} compared tokens (KIT_GATE_MIN_TOKENS) before it can PASS a profile; "
                        f"raise --num-prompts or --max-tokens so that their product is {t.min_tokens} or more")


def reference_outputs(rows: Iterable[RequestRecord]) -> dict[str, str]:
    """prompt id -> text, from the first concurrency level's first repeat that has the prompt ok."""
    ok = [r for r in rows if r.ok]
    if not ok:
        return {}
    first_c = ok[0].concurrency
    out: dict[str, str] = {}
    for r in sorted((r for r in ok if r.concurrency == first_c), key=lambda r: r.repeat or 0):
        out.setdefault(r.prompt_id, r.text)
    return out


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, len(shorter) when one is a prefix, None if equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


@dataclass(frozen=True)
class TextComparison:
    """Two runs' texts on the prompts both have: how many, the share equal, and where the others first part
    (a CHARACTER index, per prompt and the least of them). Information only: the gate judges log-probabilities."""

    compared: int
    exact_match_rate: float | None
    first_divergence: int | None
    divergence_per_prompt: dict[str, int]


def compare_outputs(outputs: Mapping[str, str], baseline: Mapping[str, str]) -> TextComparison:
    common = [k for k in outputs if k in baseline]
    per_prompt = {k: first_difference(outputs[k], baseline[k]) for k in common}
    diverged = {k: v for k, v in per_prompt.items() if v is not None}
    return TextComparison(len(common), (len(common) - len(diverged)) / len(common) if common else None,
                          min(diverged.values()) if diverged else None, diverged)


@dataclass(frozen=True)
class Side:
    """What the gate knows of one cell: its label, its texts (information), its correctness pass (None for a
    cell without one: an older bundle), its accept length and the EAGLE-3 point it ran (None: unknown)."""

    label: str
    texts: Mapping[str, str]
    replies: Sequence[Reply] | None
    accept_length: float | None = None
    point: Point | None = None


def same_point(a: Point | None, b: Point | None) -> bool:
    """Whether two cells ran the same EAGLE-3 point: both known and equal in steps, top-k and draft tokens."""
    return a is not None and b is not None and a.values() == b.values()


def point_text(p: Point | None) -> str:
    return p.label() if p else "(unknown)"


def _any_rows(logprobs: Logprobs | None) -> bool:
    """Whether the server sent log-probabilities for any prompt (one that ignores the request sends none)."""
    return bool(logprobs) and any(rows for rows in logprobs.values())


def _accept_reasons(spec: str, cell: Side, ref: Side | None, s: GateSettings) -> tuple[list[str], str | None]:
    """The accept-length rule's reasons, and a note where the reference's accept length was not used."""
    accept = cell.accept_length
    if spec in ("off", ADAPTIVE) or accept is None:
        return [], None
    reasons = [f"accept length {accept:.2f} <= {s.min_accept} (drafts all rejected)"] if accept <= s.min_accept else []
    if ref is None or ref.accept_length is None:
        return reasons, None
    if not same_point(cell.point, ref.point):
        return reasons, (f"accept length {accept:.2f} at {point_text(cell.point)} not compared with {ref.label}'s "
                         f"{ref.accept_length:.2f} at {point_text(ref.point)}: another EAGLE-3 point accepts another "
                         "number of tokens a pass; measure the reference at this point to judge it")
    if accept < s.collapse_ratio * ref.accept_length:
        reasons.append(f"accept length {accept:.2f} < {s.collapse_ratio:.0%} of {ref.label}'s {ref.accept_length:.2f} "
                       f"at the same point {point_text(cell.point)}")
    return reasons, None


def _named(problems: Mapping[str, str], most: int = 3) -> str:
    """The first few prompts' problems, one clause each."""
    items = sorted(problems.items())
    text = "; ".join(f"prompt {pid}: {why}" for pid, why in items[:most])
    return text + (f"; and {len(items) - most} more" if len(items) > most else "")


def _common(problems: Mapping[str, str], prompts: Logprobs) -> dict[str, str]:
    """The reference's problems on the prompts this profile ran (only those are compared)."""
    return {k: v for k, v in problems.items() if k in prompts}


def null_of(ref: Side, top_k: int) -> logprob_gate.Null | None:
    """The reference against itself: its pass at its lowest level against its highest; None with one level."""
    levels = passes.by_level(ref.replies or [])
    if len(levels) < 2:
        return None
    lo, hi = min(levels), max(levels)
    return logprob_gate.Null(f"{ref.label} at concurrency {lo} against {hi}",
                             logprob_gate.compare(levels[lo], levels[hi], top_k))


class LevelJson(TypedDict):
    """One level's verdict as a cell's record keeps it (`LevelVerdict.to_json`)."""

    status: str
    reasons: list[str]
    stats: dict[str, float | int | None] | None


class LevelsJson(TypedDict):
    """The log-probability verdict as a cell's record keeps it (`LevelsVerdict.to_json`); `logprobs` are the
    first level's statistics."""

    status: str
    reasons: list[str]
    levels: dict[str, LevelJson]
    logprobs: dict[str, float | int | None] | None
    tolerance: dict[str, object]
    notes: list[str]


@dataclass(frozen=True)
class LevelVerdict:
    """The verdict at one concurrency level: PASS, FAIL or NOT_ENOUGH, why, and the statistics compared (None
    where none could be)."""

    status: str
    reasons: list[str]
    stats: logprob_gate.GateStats | None = None

    def to_json(self) -> LevelJson:
        return {"status": self.status, "reasons": self.reasons, "stats": self.stats.as_dict() if self.stats else None}


@dataclass(frozen=True)
class LevelsVerdict:
    """The log-probability verdict of a cell against its reference: status, reasons (each naming its level), each
    level's verdict by its concurrency (as text, the record's key), the limits applied, notes."""

    status: str
    reasons: list[str]
    tolerance: logprob_gate.Tolerance
    levels: dict[str, LevelVerdict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def first(self) -> logprob_gate.GateStats | None:
        """The lowest level's statistics: the cell's headline figures."""
        return self.levels[min(self.levels, key=int)].stats if self.levels else None

    def to_json(self) -> LevelsJson:
        first = self.first
        return {"status": self.status, "reasons": self.reasons,
                "levels": {k: v.to_json() for k, v in self.levels.items()},
                "logprobs": first.as_dict() if first else None, "tolerance": self.tolerance.as_dict(),
                "notes": self.notes}


def judge_levels(cell: Side, ref: Side, t: Thresholds) -> LevelsVerdict:
    """The log-probability verdict of a cell against its reference, level by level, under limits from the
    reference's null: status, reasons (each naming its level), each level's statistics, the tolerance."""
    mine, theirs = passes.by_level(cell.replies or []), passes.by_level(ref.replies or [])
    bad_mine, bad_theirs = passes.problems_by_level(cell.replies or []), passes.problems_by_level(ref.replies or [])
    tol = logprob_gate.tolerance(t, null_of(ref, t.top_k))
    per_level: dict[str, LevelVerdict] = {}
    notes = list(tol.notes)
    for level in sorted(mine):
        if level not in theirs:
            notes.append(f"no {ref.label} reply at concurrency {level}: that level is not compared")
            continue
        stats = None
        bad = [(name, b) for name, b in (("this profile", bad_mine.get(level, {})),
                                         (ref.label, _common(bad_theirs.get(level, {}), mine[level])))
               if b and not (name == ref.label and ref.label == cell.label)]  # the reference judged against itself
        if not _any_rows(mine[level]) or not _any_rows(theirs[level]):
            side, problems = (("this profile", bad_mine.get(level, {})) if not _any_rows(mine[level])
                              else (ref.label, bad_theirs.get(level, {})))
            malformed = {k: v for k, v in problems.items() if v != passes.NO_ROWS}
            status = logprob_gate.NOT_ENOUGH
            why = ([f"{side}'s correctness pass has no usable log-probabilities: {_named(malformed)}"] if malformed
                   else [f"{NO_LOGPROBS} for {side}'s correctness pass"])
        else:
            stats = logprob_gate.compare(theirs[level], mine[level], t.top_k)
            status, why = logprob_gate.verdict(stats, t, tol)
            if stats.tokens < logprob_gate.P99_MIN_TOKENS:
                notes.append(f"concurrency {level}: p99 reported, not judged ({stats.tokens} tokens compared, "
                             f"{logprob_gate.P99_MIN_TOKENS} needed for a 99th percentile to be more than a few moves)")
            # A prompt without usable log-probabilities proves nothing, and one a server garbled or left out could
            # be the one that fails: it keeps a level from a PASS (a FAIL elsewhere still stands).
            unusable = [f"{len(b)} prompt(s) of {name}'s correctness pass have no usable log-probabilities, so the "
                        f"rest cannot vouch for it: {_named(b)}" for name, b in bad]
            if status == logprob_gate.PASS and unusable:
                status, why = logprob_gate.NOT_ENOUGH, unusable
            elif status == logprob_gate.NOT_ENOUGH:
                why = why + unusable
            else:
                notes += [f"concurrency {level}: {u}" for u in unusable]
        per_level[str(level)] = LevelVerdict(status, why, stats)
    statuses = {v.status for v in per_level.values()}
    worst = next((s for s in (logprob_gate.FAIL, logprob_gate.NOT_ENOUGH) if s in statuses), None)
    if not per_level:
        status, reasons = logprob_gate.NOT_ENOUGH, [f"no level of this profile's correctness pass has a {ref.label} "
                                                    "reply to compare with"]
    elif worst is None:
        status, reasons = logprob_gate.PASS, []
    else:
        status = worst
        reasons = [f"at concurrency {lv}: {w}" if len(mine) > 1 else w
                   for lv, v in per_level.items() if v.status == worst for w in v.reasons]
    return LevelsVerdict(status, reasons, tol, per_level, notes)


def gate(spec: str, cell: Side, reference: Side | None, settings: GateSettings = GateSettings(), *,
         thresholds: Thresholds | None = None) -> Correctness:
    """The correctness verdict of one (profile, spec[, point]): status PASS, FAIL, 'not enough evidence' or n/a, as a
    cell's record keeps it (bench/bundle/schema.py `Correctness`: status, reasons, exact_match_rate and
    first_divergence, and the rest as `_verdict` writes it).

    SettingError (exit 2) for a bad KIT_GATE_* threshold when `thresholds` is None."""
    return Correctness.model_validate(_verdict(spec, cell, reference, settings, thresholds or logprob_gate.thresholds()))


def _verdict(spec: str, cell: Side, reference: Side | None, settings: GateSettings, t: Thresholds) -> JsonObject:
    """The verdict's keys. Always there: status, reasons, logprobs and the keys from baseline to note; `levels`,
    `tolerance` and `notes` (`LevelsJson`) where the cell was judged on log-probabilities; `accept_note` and
    `divergence_per_prompt` where they apply."""
    result: JsonObject = {
        "baseline": reference.label if reference is not None else f"{BASELINE}+{spec}",
        "rule": "logprob",
        "exact_match_rate": None,
        "first_divergence": None,
        "divergence_unit": UNIT,
        "compared": 0,
        "accept_length": cell.accept_length,
        "baseline_accept_length": reference.accept_length if reference is not None else None,
        "thresholds": asdict(t),
        "logprobs": None,
        "note": TEXTS_DIFFER,
        "reasons": [],
    }
    if spec == ADAPTIVE:
        result["accept_note"] = ADAPTIVE_ACCEPT
    if not cell.texts and not cell.replies:
        result["status"] = "n/a (not measured)"
        return result
    has_baseline = reference is not None and (bool(reference.texts) or bool(reference.replies))
    reasons, accept_note = _accept_reasons(spec, cell, reference if has_baseline else None, settings)
    if accept_note:
        result["accept_note"] = accept_note
    if has_baseline and reference is not None and reference.texts:
        cmp = compare_outputs(cell.texts, reference.texts)
        result.update(compared=cmp.compared, exact_match_rate=cmp.exact_match_rate,
                      first_divergence=cmp.first_divergence, divergence_per_prompt=cmp.divergence_per_prompt)
    if reasons:
        result.update(status=logprob_gate.FAIL, reasons=reasons)
        return result
    if not has_baseline or reference is None:
        result["status"] = "n/a (no baseline)"
        return result
    if not cell.replies or not reference.replies:
        side = "this profile" if not cell.replies else reference.label
        result.update(status=logprob_gate.NOT_ENOUGH, reasons=[f"{NO_LOGPROBS} for {side}'s correctness pass"])
        return result
    result.update(judge_levels(cell, reference, t).to_json())
    return result
