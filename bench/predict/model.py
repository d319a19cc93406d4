"""The cost model, as plain functions (all times in ms unless the name says us).

verify_ms     = compute_ms + n_allreduce * allreduce_us / 1000 + overhead_ms
cycle_ms      = draft_ms + verify_ms                      (one speculative step)
spec_tokps    = accept_len / cycle_ms * 1000              (accept_len: tokens emitted per step)
baseline_tokps= 1000 / decode_ms                          (one token per plain decode step)
breakeven_accept_len = baseline_tokps * cycle_ms / 1000   (accept length at which spec == baseline)
allreduce_us_for(target) = ((accept_len*1000/target - draft_ms) - compute_ms - overhead_ms) * 1000 / n
"""

from __future__ import annotations


def verify_ms(compute_ms: float, n_allreduce: int, allreduce_us: float, overhead_ms: float = 0.0) -> float:
    return compute_ms + n_allreduce * allreduce_us / 1000.0 + overhead_ms


def spec_tokps(accept_len: float, draft_ms: float, verify_ms_: float) -> float:
    return accept_len / (draft_ms + verify_ms_) * 1000.0


def baseline_tokps(decode_ms: float) -> float:
    return 1000.0 / decode_ms


def breakeven_accept_len(baseline_tokps_: float, draft_ms: float, verify_ms_: float) -> float:
    return baseline_tokps_ * (draft_ms + verify_ms_) / 1000.0


def allreduce_us_for_target(
    target_tokps: float,
    accept_len: float,
    draft_ms: float,
    compute_ms: float,
    overhead_ms: float,
    n_allreduce: int,
) -> float:
    """Per-all-reduce latency that reaches `target_tokps`; negative means impossible even at 0 us."""
    verify_budget_ms = accept_len * 1000.0 / target_tokps - draft_ms
    return (verify_budget_ms - compute_ms - overhead_ms) * 1000.0 / n_allreduce
