"""Human-readable report of a trace analysis: verdict first, then the tables behind it."""

from __future__ import annotations

from rich.console import Console

from bench.report.tables import fmt, table
from bench.trace.result import CallStats, TraceResult


def print_report(result: TraceResult, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # files and pipes: wide enough that headers are not cut
            console = Console(width=max(console.width, 120))
    console.print(f"[bold]{result.file}[/bold]")
    source = {"gpu": "GPU kernels", "host": "host-side collective ops", "none": "nothing found"}[
        result.source
    ]
    console.print(
        f"communication measured from: {source}; {result.kernels} GPU events, {result.comm_kernels} communication"
    )

    if result.steps:
        denom = "GPU window" if result.source != "host" else "CPU step time"
        cols = ("kind", "steps", "cpu ms", "GPU window ms", "GPU busy ms", "comm ms", "comm share", "AR/step",
                "BC/step", "AG/step")
        rows = [(kind, s.steps, fmt(s.mean_cpu_ms, 3), fmt(s.mean_gpu_window_ms, 3),
                 fmt(s.mean_gpu_busy_ms, 3), fmt(s.mean_comm_ms, 3),
                 "-" if s.comm_share is None else f"{s.comm_share:.0%}", fmt(s.allreduces_per_step, 1),
                 fmt(s.broadcasts_per_step, 1), fmt(s.allgathers_per_step, 1))
                for kind, s in result.steps.items()]
        console.print(table(f"per step kind (means per step; comm share = communication / {denom}; AR all-reduces, "
                            "BC broadcasts, AG all-gathers)", cols, rows, left=0))
    else:
        console.print("[dim]no step markers recognised (see `bench trace --help` for the names)[/dim]")

    h = result.host_allreduce
    if result.comm_by_family or h.count:
        stats: list[tuple[str, CallStats]] = list(result.comm_by_family.items())
        if h.count:
            stats.append(("host all-reduce ops", h))
        rows = [(name, s.count, fmt(s.mean_us, 1), fmt(s.p50_us, 1), fmt(s.p99_us, 1), fmt(s.total_us, 0))
                for name, s in stats]
        console.print(table("communication (µs per call)", ("kind", "calls", "mean", "p50", "p99", "total"), rows, left=0))
    by_op = [(op.replace("_", "-"), s) for op, s in result.comm_by_op.items()]
    by_op += [(f"host {name} ops", s) for s, name in ((result.host_broadcast, "broadcast"),
                                                      (result.host_allgather, "all-gather")) if s.count]
    if by_op:
        rows = [(name, s.count, fmt(s.mean_us, 1), fmt(s.p50_us, 1), fmt(s.p99_us, 1), fmt(s.total_us, 0))
                for name, s in by_op]
        console.print(table("communication by collective (µs per call)", ("op", "calls", "mean", "p50", "p99", "total"),
                            rows, left=0))

    if result.devices:
        cols = ("device", "span ms", "busy ms", "comm ms", "idle ms", "gaps", "largest gap µs", "streams")
        rows = [(d.device, fmt(d.span_ms, 3), fmt(d.busy_ms, 3), fmt(d.comm_ms, 3), fmt(d.idle_ms, 3),
                 d.idle_gaps, fmt(d.largest_gap_us, 1), len(d.streams)) for d in result.devices]
        console.print(table(f"GPU timeline per device (idle gaps counted from {5:g} µs)", cols, rows, left=0))
    console.print(f"[bold]verdict:[/bold] {result.verdict}")
