"""Correctness gate: a fast profile whose numerics are broken (or that kills acceptance) is a FAIL, and one
that only sums in another order is not.

Each (profile, spec) is compared with the `baseline` profile under the same spec mode, prompt by prompt,
on its correctness pass (bench/run/measure.py: one untimed greedy reply per prompt with every token's
log-probability and its top alternatives, bench/logprob_rows.py):

* the verdict (bench/run/logprob_gate.py): over the tokens before each prompt's first divergence, where both
  runs saw the same text, how far the chosen token's log-probability moved (its p99 and max), and at the
  first divergence whether the two tokens were a near-tie. PASS, FAIL, or "not enough evidence" when too
  few tokens could be compared, or the server sent no log-probabilities (never a PASS then). Thresholds are
  the KIT_GATE_* settings; docs/bench.md "The correctness gate" has their calibration;
* accept length under speculation: FAIL when it collapses, below `collapse_ratio` x baseline's under the
  same spec, or at most `min_accept` (about 1.0 means every draft token is rejected, the signature of a
  wrong all-reduce). Not under eagle3-adaptive (ADAPTIVE_ACCEPT): there a correct plan reads 1.0 wherever a
  tier runs 0 steps, and the cell's accept length mixes the tiers its levels ran, so only the
  log-probabilities judge it;
* exact match and first divergence of the texts, as information only: two correct all-reduces that add the
  same partial sums in another order round differently in bf16, greedy decoding then flips at near-ties, and
  the texts part ways (docs/evidence.md "Reduction order and greedy text": 74-78% of texts matched between
  correct orders). The first divergence is a CHARACTER index of the generated text, the same for /generate
  and the chat API.

Without a baseline run for that spec the status is "n/a (no baseline)", unless the absolute accept-length
rule already fails it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.run import logprob_gate
from bench.run.logprob_gate import Thresholds, TokenLogprob
from launcher.profiles.adaptive_tiers import SPEC_MODE as ADAPTIVE

BASELINE = "baseline"
UNIT = "character"
TEXTS_DIFFER = ("texts may differ between correct profiles: a reordered all-reduce rounds differently in bf16, "
                "so greedy decoding flips at near-ties; the gate judges log-probabilities, not text")
NO_LOGPROBS = "the server returned no log-probabilities"
ADAPTIVE_ACCEPT = (f"accept length reported, not judged, under {ADAPTIVE}: SGLang 0.5.23 counts a 0-step pass as a "
                   "verify of one token (batch_result_processor.py:829-832), so a correct plan reads 1.0 in a 0-step "
                   "tier, as a wrong all-reduce does; the log-probabilities judge it")

Logprobs = Mapping[str, Sequence[TokenLogprob] | None]


@dataclass(frozen=True)
class GateSettings:
    collapse_ratio: float = 0.6
    min_accept: float = 1.05

    def as_dict(self, thresholds: Thresholds) -> dict[str, Any]:
        """What the manifest records of the gate: these and the log-probability thresholds."""
        return {**asdict(self), **asdict(thresholds)}


def reference_outputs(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """prompt id -> text, from the first concurrency level's first repeat that has the prompt ok."""
    rows = [r for r in rows if r.get("ok")]
    if not rows:
        return {}
    first_c = rows[0].get("concurrency")
    out: dict[str, str] = {}
    for r in sorted((r for r in rows if r.get("concurrency") == first_c), key=lambda r: r.get("repeat", 0)):
        out.setdefault(str(r["prompt_id"]), str(r.get("text") or ""))
    return out


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, len(shorter) when one is a prefix, None if equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_outputs(outputs: Mapping[str, str], baseline: Mapping[str, str]) -> dict[str, Any]:
    common = [k for k in outputs if k in baseline]
    per_prompt = {k: first_difference(outputs[k], baseline[k]) for k in common}
    diverged = {k: v for k, v in per_prompt.items() if v is not None}
    return {
        "compared": len(common),
        "exact_match_rate": (len(common) - len(diverged)) / len(common) if common else None,
        "first_divergence": min(diverged.values()) if diverged else None,
        "divergence_unit": UNIT,
        "divergence_per_prompt": diverged,
    }


def _any_rows(logprobs: Logprobs | None) -> bool:
    """Whether the server sent log-probabilities for any prompt (one that ignores the request sends none)."""
    return bool(logprobs) and any(rows for rows in logprobs.values())


def _accept_reasons(spec: str, accept: float | None, base_accept: float | None, s: GateSettings,
                    has_baseline: bool) -> list[str]:
    reasons = []
    if spec in ("off", ADAPTIVE) or accept is None:
        return reasons
    if accept <= s.min_accept:
        reasons.append(f"accept length {accept:.2f} <= {s.min_accept} (drafts all rejected)")
    if has_baseline and base_accept is not None and accept < s.collapse_ratio * base_accept:
        reasons.append(f"accept length {accept:.2f} < {s.collapse_ratio:.0%} of baseline's {base_accept:.2f}")
    return reasons


def gate(
    spec: str,
    outputs: Mapping[str, str],
    accept_length: float | None,
    baseline_outputs: Mapping[str, str] | None,
    baseline_accept: float | None,
    settings: GateSettings = GateSettings(),
    *,
    logprobs: Logprobs | None = None,
    baseline_logprobs: Logprobs | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, Any]:
    """The correctness verdict of one (profile, spec): status PASS, FAIL, 'not enough evidence' or n/a.

    `outputs`: the measured texts (exact match, for information); `logprobs`: the correctness pass (None when
    the cell has none). SettingError (exit 2) for a bad KIT_GATE_* threshold when `thresholds` is None."""
    t = thresholds or logprob_gate.thresholds()
    result: dict[str, Any] = {
        "baseline": f"{BASELINE}+{spec}",
        "rule": "logprob",
        "exact_match_rate": None,
        "first_divergence": None,
        "divergence_unit": UNIT,
        "compared": 0,
        "accept_length": accept_length,
        "baseline_accept_length": baseline_accept,
        "thresholds": asdict(t),
        "logprobs": None,
        "note": TEXTS_DIFFER,
        "reasons": [],
    }
    if spec == ADAPTIVE:
        result["accept_note"] = ADAPTIVE_ACCEPT
    if not outputs and not logprobs:
        result["status"] = "n/a (not measured)"
        return result
    has_baseline = bool(baseline_outputs) or bool(baseline_logprobs)
    reasons = _accept_reasons(spec, accept_length, baseline_accept, settings, has_baseline)
    if baseline_outputs:
        cmp = compare_outputs(outputs, baseline_outputs)
        result.update({k: cmp[k] for k in ("compared", "exact_match_rate", "first_divergence")})
        result["divergence_per_prompt"] = cmp["divergence_per_prompt"]
    if reasons:
        result.update(status=logprob_gate.FAIL, reasons=reasons)
        return result
    if not has_baseline:
        result["status"] = "n/a (no baseline)"
        return result
    if not _any_rows(logprobs) or not _any_rows(baseline_logprobs):
        side = "this profile" if not _any_rows(logprobs) else BASELINE
        result.update(status=logprob_gate.NOT_ENOUGH, reasons=[f"{NO_LOGPROBS} for {side}'s correctness pass"])
        return result
    stats = logprob_gate.compare(baseline_logprobs, logprobs, t.top_k)
    result["logprobs"] = stats.as_dict()
    status, why = logprob_gate.verdict(stats, t)
    result.update(status=status, reasons=why)
    return result
