"""Correctness gate: a fast profile that changes greedy outputs (or kills acceptance) is a FAIL.

For each (profile, spec), the greedy (temperature 0) outputs are compared with the `baseline`
profile's outputs under the same spec mode, prompt by prompt:
* exact-match rate: share of common prompts whose generated text is identical;
* first divergence: the CHARACTER index of the first differing character of the generated text
  (characters, not tokens, so that it means the same for /generate and the chat API, where token
  ids are not returned); the earliest over all prompts is reported, and each prompt's index too.

A profile FAILs when its exact-match rate is below `min_exact_match`, or its accept length under
speculation collapses: below `collapse_ratio` x baseline's under the same spec, or at most
`min_accept` (about 1.0 means every draft token is rejected, the signature of a wrong
all-reduce). Without a baseline run for that spec the status is "n/a (no baseline)", unless the
absolute accept-length rule already fails it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

BASELINE = "baseline"
UNIT = "character"


@dataclass(frozen=True)
class GateSettings:
    min_exact_match: float = 0.9
    collapse_ratio: float = 0.6
    min_accept: float = 1.05


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


def gate(
    spec: str,
    outputs: Mapping[str, str],
    accept_length: float | None,
    baseline_outputs: Mapping[str, str] | None,
    baseline_accept: float | None,
    settings: GateSettings = GateSettings(),
) -> dict[str, Any]:
    """The correctness verdict of one (profile, spec): status PASS, FAIL or 'n/a (no baseline)'."""
    result: dict[str, Any] = {
        "baseline": f"{BASELINE}+{spec}",
        "exact_match_rate": None,
        "first_divergence": None,
        "divergence_unit": UNIT,
        "compared": 0,
        "accept_length": accept_length,
        "baseline_accept_length": baseline_accept,
        "min_exact_match": settings.min_exact_match,
        "reasons": [],
    }
    reasons: list[str] = result["reasons"]
    if not outputs:
        result["status"] = "n/a (not measured)"
        return result
    speculative = spec != "off"
    if speculative and accept_length is not None and accept_length <= settings.min_accept:
        reasons.append(f"accept length {accept_length:.2f} <= {settings.min_accept} (drafts all rejected)")
    has_baseline = baseline_outputs is not None and len(baseline_outputs) > 0
    if has_baseline:
        cmp = compare_outputs(outputs, baseline_outputs or {})
        result.update({k: cmp[k] for k in ("compared", "exact_match_rate", "first_divergence")})
        result["divergence_per_prompt"] = cmp["divergence_per_prompt"]
        rate = cmp["exact_match_rate"]
        if rate is None:
            reasons.append("no prompt in common with the baseline")
        elif rate < settings.min_exact_match:
            reasons.append(f"exact match {rate:.0%} < {settings.min_exact_match:.0%} of {BASELINE}+{spec}")
        if (
            speculative
            and accept_length is not None
            and baseline_accept is not None
            and accept_length < settings.collapse_ratio * baseline_accept
        ):
            reasons.append(
                f"accept length {accept_length:.2f} < {settings.collapse_ratio:.0%} of baseline's {baseline_accept:.2f}"
            )
    if reasons:
        result["status"] = "FAIL"
    elif not has_baseline:
        result["status"] = "n/a (no baseline)"
    else:
        result["status"] = "PASS"
    return result
