"""The one-line verdict of a trace's analysis: communication share of the main step kind, collectives per
step, the all-reduces' mean latency, and where the figures come from."""

from __future__ import annotations

from bench.trace.result import StepSummary, TraceResult
from bench.trace.step_names import KIND_PREFERENCE


def _main_kind(steps: dict[str, StepSummary]) -> str | None:
    for kind in KIND_PREFERENCE:
        if kind in steps:
            return kind
    return next(iter(steps), None)


def verdict(result: TraceResult) -> str:
    """One line: 'communication 70% of verify; 123 all-reduces/step; 3 broadcasts/step; 1 all-gathers/step;
    mean 205 µs' (the mean is the all-reduces'; broadcasts and all-gathers only when the step has them)."""
    source = result.source
    if source == "none":
        return f"no communication found: no communication kernels and no host all-reduce ops in {result.kernels} GPU events"
    stats = result.allreduce if source == "gpu" else result.host_allreduce
    mean = f"mean {stats.mean_us:.0f} µs" if stats.mean_us is not None else "no all-reduces"
    note = ""
    if source == "host":
        note = " (host-side op time: the trace has no communication kernels" + (
            ", e.g. NCCL with one rank)" if result.kernels else ", CPU-only trace)"
        )
    kind = _main_kind(result.steps)
    if kind is None:
        if source == "gpu":
            busy = sum(d.busy_ms for d in result.devices)
            comm = sum(d.comm_ms for d in result.devices)
            share = f"{comm / busy:.0%} of GPU busy time" if busy > 0 else "of unknown share"
        else:
            share = "of unknown share"
        return f"communication {share} (no step markers); {stats.count} all-reduces; {mean}{note}"
    s = result.steps[kind]
    share = f"{s.comm_share:.0%}" if s.comm_share is not None else "?"
    others = "".join(f"; {_count_text(n)} {what}/step"
                     for n, what in ((s.broadcasts_per_step, "broadcasts"), (s.allgathers_per_step, "all-gathers")) if n)
    return (f"communication {share} of {kind}; {_count_text(s.allreduces_per_step)} all-reduces/step{others}; "
            f"{mean}{note}")


def _count_text(per_step: float) -> str:
    return f"{per_step:.0f}" if per_step == int(per_step) else f"{per_step:.1f}"
