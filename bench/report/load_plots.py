"""The load view's PNGs (bench/report/load_rows.py): frontier.png, per-user against total tok/s with the
frontier marked, and latency_rate.png, p99 TTFT and TPOT against the offered open-loop rate with the SLA
targets. Both say SIMULATED in the title and across the plot when the server was the stand-in."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.report.load_rows import FRONTIER_PNG, LATENCY_RATE_PNG, LoadPoint  # noqa: E402
from bench.report.plots import LINESTYLES, MARKS, SIM_TITLE, save  # noqa: E402


def _by_cell(pts: list[LoadPoint]) -> dict[str, list[LoadPoint]]:
    out: dict[str, list[LoadPoint]] = {}
    for p in pts:
        out.setdefault(p.cell, []).append(p)
    return out


def _legend(cell: str, status: str) -> str:
    mark = MARKS.get(status)
    return f"{cell} ({mark.word})" if mark else cell


def frontier(path: Path, pts: list[LoadPoint], simulated: bool) -> Path | None:
    """Per-user tok/s (x) against total tok/s (y), one line per cell through its loads in order, each point
    labelled with its load; the frontier as a black line through its points. None (no file) without a point."""
    drawn = [p for p in pts if p.total_tps is not None and p.per_user_tps is not None and p.status != "INVALID"]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(8.0, 5.5))
    for i, (cell, cell_pts) in enumerate(_by_cell(drawn).items()):
        status = cell_pts[0].status
        xs, ys = [p.per_user_tps for p in cell_pts], [p.total_tps for p in cell_pts]
        ax.plot(xs, ys, marker="o", color=f"C{i % 10}", linestyle=LINESTYLES.get(status, "-"), alpha=0.8,
                label=_legend(cell, status))
        for p, x, y in zip(cell_pts, xs, ys, strict=True):
            ax.annotate(p.load, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    best = sorted((p for p in drawn if p.frontier), key=lambda p: p.per_user_tps or 0.0)
    if best:
        ax.plot([p.per_user_tps for p in best], [p.total_tps for p in best], color="black", linewidth=2,
                marker="s", markerfacecolor="none", markersize=10, label="frontier", zorder=5)
    ax.legend(title="cell", fontsize=8)
    ax.set_xlabel("per-user tok/s (median request, TTFT included)")
    ax.set_ylabel("total output tok/s")
    ax.set_xlim(left=0, right=1.15 * max(p.per_user_tps or 0.0 for p in drawn) or None)
    ax.set_ylim(bottom=0)  # a cut axis exaggerates small differences
    ax.set_title(f"{SIM_TITLE if simulated else ''}per-user against total throughput", fontsize=11)
    return save(fig, path, simulated)


def latency_rate(path: Path, pts: list[LoadPoint], simulated: bool,
                 targets: tuple[float | None, float | None]) -> Path | None:
    """p99 TTFT and p99 TPOT (two panels) against the offered rate, one line per cell; the targets dashed.
    None (no file) when no valid cell has an open-loop point."""
    drawn = [p for p in pts if p.request_rate is not None and p.status != "INVALID"]
    if not drawn:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.5))
    for ax, key, target, name in ((axes[0], "ttft_p99_ms", targets[0], "p99 TTFT (ms)"),
                                  (axes[1], "tpot_p99_ms", targets[1], "p99 TPOT (ms)")):
        for i, (cell, cell_pts) in enumerate(_by_cell(drawn).items()):
            cell_pts = sorted(cell_pts, key=lambda p: p.request_rate or 0.0)
            ax.plot([p.request_rate for p in cell_pts], [getattr(p, key) for p in cell_pts], marker="o",
                    color=f"C{i % 10}", linestyle=LINESTYLES.get(cell_pts[0].status, "-"),
                    label=_legend(cell, cell_pts[0].status))
        if target is not None:
            ax.axhline(target, color="red", linestyle="--", linewidth=1, label=f"SLA {target:g} ms")
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_ylabel(name)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle(f"{SIM_TITLE if simulated else ''}p99 latency against offered load", fontsize=11)
    return save(fig, path, simulated)


def write_all(run_dir: Path, pts: list[LoadPoint], simulated: bool,
              targets: tuple[float | None, float | None]) -> list[Path]:
    """The load view's PNGs that have something to draw."""
    out = [frontier(run_dir / FRONTIER_PNG, pts, simulated), latency_rate(run_dir / LATENCY_RATE_PNG, pts, simulated,
                                                                       targets)]
    return [p for p in out if p is not None]
