"""PNG plots of a bundle (matplotlib, Agg backend: no display needed).

throughput.png: tok/s per profile, one bar per spec mode, error bars = sd over repeats; invalid
cells get no bar and the word "invalid", correctness FAILs are hatched red and labelled FAIL, cells with
"not enough evidence" are dotted gray and labelled so (never drawn as a pass).
tpot.png: per-request TPOT distribution of every valid (profile, spec), as box plots.
throughput_latency.png (two or more concurrency levels only): output tok/s (mean over repeats) against
median TPOT per request (p50 over the valid repeats' requests), one line per valid cell, one point per
concurrency level, each point labelled c=<level>; a FAIL line is dashed and an unverified one dotted, and
their legend entries say so. With one level there is no such plot (summary.md says so).
Both say SIMULATED in the title and across the plot when the server was the stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.bundle import names as bundle_names  # noqa: E402
from bench.bundle import store as bundle
from bench.bundle.schema import Cell, Manifest  # noqa: E402
from bench.report.summary_rows import LATENCY_X, LATENCY_X_LABEL, UNVERIFIED, SummaryRow, latency_curves  # noqa: E402

SIM_TITLE = "SIMULATED (stand-in server) - "


@dataclass(frozen=True)
class Mark:
    """How a bar whose correctness is not a pass looks: its hatch, the colour of hatch and word, the word."""

    hatch: str
    color: str
    word: str


# only a FAIL is hatched red; a cell the gate could not vouch for is dotted gray, never drawn as a pass
MARKS = {"FAIL": Mark("//", "red", "FAIL"), UNVERIFIED: Mark("..", "dimgray", "not enough evidence")}


def _mark_simulated(fig: Any, simulated: bool) -> None:
    if simulated:
        fig.text(0.5, 0.5, "SIMULATED", fontsize=60, color="red", alpha=0.12, ha="center", va="center",
                 rotation=20)


def throughput(path: Path, rows: list[SummaryRow], simulated: bool, concurrency: int) -> Path:
    rows = [r for r in rows if r.concurrency == concurrency]
    profiles = list(dict.fromkeys(r.profile for r in rows))
    specs = list(dict.fromkeys(r.spec for r in rows))
    width = 0.8 / max(1, len(specs))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(profiles) + 2), 4.5))
    labelled: set[str] = set()
    for j, spec in enumerate(specs):
        for i, prof in enumerate(profiles):
            r = next((x for x in rows if x.profile == prof and x.spec == spec), None)
            if r is None:
                continue
            x = i + (j - (len(specs) - 1) / 2) * width
            if not r.valid or r.output_throughput_mean is None:
                ax.text(x, 0, "invalid", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
                continue
            mark = MARKS.get(r.status)
            ax.bar(x, r.output_throughput_mean, width, yerr=r.output_throughput_sd or 0.0, capsize=3,
                   color=f"C{j}", hatch=mark.hatch if mark else None, edgecolor=mark.color if mark else None,
                   label=None if spec in labelled else spec)
            labelled.add(spec)
            if mark:
                ax.text(x, r.output_throughput_mean, mark.word, ha="center", va="bottom", fontsize=8,
                        color=mark.color)
    if labelled:
        ax.legend(title="spec")
    ax.set_xticks(range(len(profiles)), profiles, rotation=20, ha="right")
    ax.set_ylabel("output tok/s (mean ± sd over repeats)")
    ax.set_ylim(bottom=0)  # a cut axis exaggerates small differences
    ax.set_title(f"{SIM_TITLE if simulated else ''}throughput per profile, concurrency {concurrency}")
    return save(fig, path, simulated)


def save(fig: Any, path: Path, simulated: bool) -> Path:
    _mark_simulated(fig, simulated)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tpot(path: Path, run_dir: Path, cells: list[Cell], simulated: bool, concurrency: int) -> Path:
    labels, data = [], []
    for c in cells:
        if not c.valid:
            continue
        values = [
            tpot_s * 1000.0
            for r in bundle.read_requests(run_dir, c.profile, c.spec, c.spec_params)
            if r.ok and r.concurrency == concurrency and (tpot_s := r.tpot_s) is not None
        ]
        if values:
            labels.append(f"{c.profile}\n{c.spec}{bundle_names.point_text(c.spec_params)}")
            data.append(values)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 4.5))
    if data:
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    else:
        ax.text(0.5, 0.5, "no valid requests", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("TPOT per request (ms)")
    ax.set_ylim(bottom=0)  # a cut axis exaggerates small differences
    ax.set_title(f"{SIM_TITLE if simulated else ''}TPOT distribution, concurrency {concurrency}")
    return save(fig, path, simulated)


LINESTYLES = {"FAIL": "--", UNVERIFIED: ":"}


def throughput_latency(path: Path, rows: list[SummaryRow], simulated: bool) -> Path | None:
    """Output tok/s against median TPOT, one line per cell, one point per concurrency level; None (and no
    file) when no cell has a point to draw."""
    curves = latency_curves(rows)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(8.0, 5.0))
    for i, (label, points) in enumerate(curves.items()):
        status = points[0].status
        mark = MARKS.get(status)
        xs = [r.pooled(LATENCY_X) for r in points]
        ys = [r.output_throughput_mean for r in points]
        ax.plot(xs, ys, marker="o", color=f"C{i % 10}", linestyle=LINESTYLES.get(status, "-"),
                label=f"{label} ({mark.word})" if mark else label)
        for r, x, y in zip(points, xs, ys, strict=True):
            ax.annotate(f"c={r.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.legend(title="cell", fontsize=8)
    ax.set_xlabel(LATENCY_X_LABEL)
    ax.set_ylabel("output tok/s (mean over repeats)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)  # a cut axis exaggerates small differences
    ax.set_title(f"{SIM_TITLE if simulated else ''}throughput vs median TPOT by concurrency", fontsize=11)
    return save(fig, path, simulated)


def write_all(run_dir: Path, manifest: Manifest, cells: list[Cell], rows: list[SummaryRow]) -> list[Path]:
    """throughput.png and tpot.png for the first concurrency level, plus one pair per further level; with two
    or more levels, throughput_latency.png too (when a valid cell has a point)."""
    simulated = bool(manifest.simulated)
    levels = manifest.levels
    out = []
    for k, c in enumerate(levels):
        suffix = "" if k == 0 else f"_c{c}"
        out.append(throughput(run_dir / f"throughput{suffix}.png", rows, simulated, c))
        out.append(tpot(run_dir / f"tpot{suffix}.png", run_dir, cells, simulated, c))
    if len(levels) >= 2:
        written = throughput_latency(run_dir / "throughput_latency.png", rows, simulated)
        if written is not None:
            out.append(written)
    return out
