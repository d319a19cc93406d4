"""Human-readable report of a trace analysis: verdict first, then the tables behind it."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_report(result: dict[str, Any], console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # files and pipes: wide enough that headers are not cut
            console = Console(width=max(console.width, 120))
    console.print(f"[bold]{result['file']}[/bold]")
    source = {"gpu": "GPU kernels", "host": "host-side collective ops", "none": "nothing found"}[
        result["source"]
    ]
    console.print(
        f"communication measured from: {source}; {result['kernels']} GPU events, {result['comm_kernels']} communication"
    )

    if result["steps"]:
        denom = "GPU window" if result["source"] != "host" else "CPU step time"
        t = Table(title=f"per step kind (means per step; comm share = communication / {denom})")
        for col in (
            "kind",
            "steps",
            "cpu ms",
            "GPU window ms",
            "GPU busy ms",
            "comm ms",
            "comm share",
            "all-reduces/step",
        ):
            t.add_column(col, justify="right")
        for kind, s in result["steps"].items():
            share = f"{s['comm_share']:.0%}" if s["comm_share"] is not None else "-"
            t.add_row(
                kind,
                str(s["steps"]),
                _f(s["mean_cpu_ms"], 3),
                _f(s["mean_gpu_window_ms"], 3),
                _f(s["mean_gpu_busy_ms"], 3),
                _f(s["mean_comm_ms"], 3),
                share,
                _f(s["allreduces_per_step"], 1),
            )
        console.print(t)
    else:
        console.print("[dim]no step markers recognised (see `bench trace --help` for the names)[/dim]")

    if result["comm_by_family"] or result["host_allreduce"]["count"]:
        t = Table(title="communication (µs per call)")
        for col in ("kind", "calls", "mean", "p50", "p99", "total"):
            t.add_column(col, justify="right")
        for family, s in result["comm_by_family"].items():
            t.add_row(
                family,
                str(s["count"]),
                _f(s["mean_us"], 1),
                _f(s["p50_us"], 1),
                _f(s["p99_us"], 1),
                _f(s["total_us"], 0),
            )
        h = result["host_allreduce"]
        if h["count"]:
            t.add_row(
                "host all-reduce ops",
                str(h["count"]),
                _f(h["mean_us"], 1),
                _f(h["p50_us"], 1),
                _f(h["p99_us"], 1),
                _f(h["total_us"], 0),
            )
        console.print(t)

    if result["devices"]:
        t = Table(title=f"GPU timeline per device (idle gaps counted from {5:g} µs)")
        for col in (
            "device",
            "span ms",
            "busy ms",
            "comm ms",
            "idle ms",
            "gaps",
            "largest gap µs",
            "streams",
        ):
            t.add_column(col, justify="right")
        for d in result["devices"]:
            t.add_row(
                str(d["device"]),
                _f(d["span_ms"], 3),
                _f(d["busy_ms"], 3),
                _f(d["comm_ms"], 3),
                _f(d["idle_ms"], 3),
                str(d["idle_gaps"]),
                _f(d["largest_gap_us"], 1),
                str(len(d["streams"])),
            )
        console.print(t)
    console.print(f"[bold]verdict:[/bold] {result['verdict']}")
