"""The cost model (all times in ms unless the name says us), on typed inputs, no command line.

verify_ms     = compute_ms + n_allreduce * allreduce_us / 1000 + overhead_ms
cycle_ms      = draft_ms + verify_ms                      (one speculative step)
spec_tokps    = accept_len / cycle_ms * 1000              (accept_len: tokens emitted per step)
baseline_tokps= 1000 / decode_ms                          (one token per plain decode step)
breakeven_accept_len = baseline_tokps * cycle_ms / 1000   (accept length at which spec == baseline)
verify_budget_ms(target) = accept_len * 1000 / target - draft_ms
allreduce_us_for(target) = (verify_budget_ms(target) - compute_ms - overhead_ms) * 1000 / n
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def verify_ms(compute_ms: float, n_allreduce: int, allreduce_us: float, overhead_ms: float = 0.0) -> float:
    return compute_ms + n_allreduce * allreduce_us / 1000.0 + overhead_ms


def spec_tokps(accept_len: float, draft_ms: float, verify_ms_: float) -> float:
    return accept_len / (draft_ms + verify_ms_) * 1000.0


def baseline_tokps(decode_ms: float) -> float:
    return 1000.0 / decode_ms


def breakeven_accept_len(baseline_tokps_: float, draft_ms: float, verify_ms_: float) -> float:
    return baseline_tokps_ * (draft_ms + verify_ms_) / 1000.0


def verify_budget_ms(target_tokps: float, accept_len: float, draft_ms: float) -> float:
    """The longest verify pass that still reaches `target_tokps` at this accept length."""
    return accept_len * 1000.0 / target_tokps - draft_ms


def allreduce_us_within(budget_ms: float, compute_ms: float, overhead_ms: float, n_allreduce: int) -> float:
    """Per-all-reduce latency that fits a verify budget; negative means impossible even at 0 us."""
    return (budget_ms - compute_ms - overhead_ms) * 1000.0 / n_allreduce


@dataclass(frozen=True)
class Step:
    """What is known of one speculative step besides its verify time; None: not given."""

    draft_ms: float = 0.0
    overhead_ms: float = 0.0
    accept_len: float | None = None
    compute_ms: float | None = None
    allreduces: int | None = None

    def verify_ms(self, allreduce_us: float) -> float:
        """Verify time from its parts (needs compute_ms and allreduces)."""
        assert self.compute_ms is not None and self.allreduces is not None
        return verify_ms(self.compute_ms, self.allreduces, allreduce_us, self.overhead_ms)


def scenario(
    label: str,
    step: Step,
    *,
    baseline: float | None,
    verify: float,
    allreduce_us: float | None,
    source: str = "",
    target_tokps: float | None = None,
) -> dict[str, Any]:
    """One verify time's predictions: cycle, spec tok/s, speed-up and break-even against the baseline."""
    accept = step.accept_len
    out: dict[str, Any] = {
        "label": label,
        "allreduce_us": None if allreduce_us is None else round(allreduce_us, 3),
        "allreduce_source": source,
        "verify_ms": round(verify, 4),
        "cycle_ms": round(step.draft_ms + verify, 4),
        "spec_tokps": round(spec_tokps(accept, step.draft_ms, verify), 3) if accept else None,
        "baseline_tokps": None if baseline is None else round(baseline, 3),
        "breakeven_accept_len": None
        if baseline is None
        else round(breakeven_accept_len(baseline, step.draft_ms, verify), 4),
    }
    out["speedup"] = round(out["spec_tokps"] / baseline, 4) if baseline and out["spec_tokps"] else None
    if target_tokps and accept:
        out["target"] = target(step, target_tokps)
    return out


def target(step: Step, target_tokps: float) -> dict[str, Any]:
    """The verify budget that reaches `target_tokps`, and the all-reduce latency it leaves when it can tell."""
    assert step.accept_len is not None
    budget = verify_budget_ms(target_tokps, step.accept_len, step.draft_ms)
    result: dict[str, Any] = {"target_tokps": target_tokps, "verify_budget_ms": round(budget, 4)}
    if step.compute_ms is None or step.allreduces is None:
        result["answer"] = (
            f"verify must take at most {budget:.2f} ms; give --compute-ms and --allreduces to turn that into an "
            "all-reduce latency"
        )
        result["allreduce_us_needed"] = None
        return result
    needed = allreduce_us_within(budget, step.compute_ms, step.overhead_ms, step.allreduces)
    result["allreduce_us_needed"] = round(needed, 3) if needed >= 0 else None
    if needed < 0:
        result["answer"] = (
            f"impossible even at 0 µs per all-reduce: compute {step.compute_ms:g} ms + overhead "
            f"{step.overhead_ms:g} ms already exceeds the {budget:.2f} ms verify budget at accept length "
            f"{step.accept_len:g}"
        )
    else:
        result["answer"] = f"each of the {step.allreduces} all-reduces must take at most {needed:.1f} µs"
    return result
