"""Write the results: a rich table on stdout, allreduce.json, allreduce.csv and allreduce.png."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from bench.allreduce.floor import Link, floor_us
from bench.allreduce.records import ResultRow
from bench.allreduce.results import COLUMNS
from bench.allreduce.sizes import format_size
from bench.report.tables import fmt, table
from launcher.atomic import write_json, write_text

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CSV_COLUMNS = ("backend", "profile", "nranks", "graph", "status", *COLUMNS, "floor_us", "nccl_tests_time_us",
               "kit_over_nccl_tests", "reason", "exact")
UNITS = (
    "size_B: bytes; count: elements; time_us: microseconds per all-reduce as nccl-tests defines it (wall "
    "clock over a pipelined loop / calls, mean over ranks); time_us_p50/p99: per-call samples (slowest rank "
    "per iteration, then percentiles); algbw_GBps = size/time_us and busbw_GBps = algbw*2(n-1)/n, in GB/s "
    "(1e9 B/s); wrong: elements that differed from the exact sum over the exact check's calls (must be 0)"
)


GroupKey = tuple[str, str, int, bool]
"""backend, profile (or '-'), ranks, CUDA graph: one table, one verdict and one plotted line each."""


def _group_key(row: ResultRow) -> GroupKey:
    return (row.backend, row.profile or "-", row.nranks, bool(row.graph))


def _groups(rows: Iterable[ResultRow]) -> dict[GroupKey, list[ResultRow]]:
    out: dict[GroupKey, list[ResultRow]] = {}
    for row in rows:
        out.setdefault(_group_key(row), []).append(row)
    return out


def print_table(rows: list[ResultRow], console: Console | None = None) -> None:
    """One table per backend/profile, nccl-tests' columns, units stated in the caption."""
    console = console or Console()
    for (backend, profile, nranks, graph), group in _groups(rows).items():
        measured = [r for r in group if r.status == "ok"]
        title = f"all-reduce · {backend} · profile {profile} · {nranks} rank{'s' if nranks > 1 else ''} · {'cuda graph' if graph else 'eager'}"
        if not measured:
            reason = group[0].reason or ""
            console.print(f"[bold]{title}[/bold]: [yellow]{group[0].status}[/yellow] — {reason}")
            continue
        first = measured[0]
        caption = f"{first.device or ''} · {first.samples} iterations · {first.method}"
        table = Table(title=title, caption=caption)
        for col in COLUMNS:
            table.add_column(col, justify="right")
        if any(r.has("floor_us") for r in measured):
            table.add_column("floor_us", justify="right")
        for row in group:
            if row.status != "ok":
                cells = [
                    str(row.size_B),
                    str(row.count if row.count is not None else ""),
                    row.type,
                    f"{row.status}: {row.reason or ''}",
                ]
                table.add_row(*cells, *[""] * (len(table.columns) - len(cells)))
                continue
            cells = [
                str(row.size_B),
                str(row.count),
                row.type,
                fmt(row.time_us),
                fmt(row.time_us_p50),
                fmt(row.time_us_p99),
                fmt(row.algbw_GBps),
                fmt(row.busbw_GBps),
                f"[red]{row.wrong}[/red]" if row.wrong else "0",
            ]
            if row.has("floor_us"):
                cells.append(fmt(row.floor_us))
            table.add_row(*cells)
        console.print(table)
    console.print(f"[dim]{UNITS}[/dim]")


def exact_verdicts(rows: list[ResultRow]) -> dict[GroupKey, str]:
    """Each checked backend's exactness verdict text (the same on all its rows), by backend/profile/ranks/mode."""
    return {key: text for key, group in _groups(rows).items() if (text := group[0].exact) is not None}


EXACT_METHOD = (
    "exact check: small integers, rank- and call-dependent, whose sums are exact in the dtype; every element of "
    "every result compared with the exact sum (int64), ranks compared bit for bit; {calls} calls per size with "
    "new values each, and with --graph one capture replayed {calls} times with new inputs; the first call of each "
    "size under the profiler to see the backend's own kernel"
)


def print_exact(rows: list[ResultRow], console: Console) -> None:
    """One line per backend: PASS, FAIL with the first wrong element, or `not run: why`."""
    from bench.allreduce.exact import EXACT_CALLS

    verdicts = exact_verdicts(rows)
    if not verdicts:
        return
    table = Table(title="exactness per backend", caption=EXACT_METHOD.format(calls=EXACT_CALLS), show_lines=True)
    for col, justify in (("backend", "left"), ("profile", "left"), ("ranks", "right"), ("mode", "left"),
                         ("verdict", "left"), ("what was checked, or why not", "left")):
        table.add_column(col, justify=justify, no_wrap=col in ("backend", "verdict"))
    for (backend, profile, nranks, graph), text in verdicts.items():
        word, _, detail = text.partition(": ")
        color = {"PASS": "green", "FAIL": "red"}.get(word, "yellow")
        table.add_row(backend, profile, str(nranks), "cuda graph" if graph else "eager", f"[{color}]{word}[/{color}]",
                      detail)
    console.print(table)


def print_comparison(rows: list[ResultRow], console: Console) -> None:
    """The kit's NCCL times beside nccl-tests' at each size, with the ratio and the host's launch share."""
    pairs = [r for r in rows if r.status == "ok" and r.has("nccl_tests_time_us")]
    if not pairs:
        console.print("[yellow]no size has both a kit NCCL row and an nccl-tests row to compare[/yellow]")
        return
    nt = {r.size_B: r for r in rows if r.backend == "nccl-tests" and r.status == "ok"}
    first = pairs[0]
    mode = "cuda graph" if first.graph else "eager"
    title = f"kit vs nccl-tests · profile {first.profile or '-'} · {first.nranks} ranks · {mode}"
    cols = ("backend", "size_B", "kit time_us", "nccl-tests time_us", "kit / nccl-tests", "host launch_us",
            "kit p50", "kit p99", "kit wrong", "nccl-tests wrong")
    body = [(r.backend, r.size_B, fmt(r.time_us), fmt(r.nccl_tests_time_us), fmt(r.kit_over_nccl_tests),
             fmt(r.host_launch_us), fmt(r.time_us_p50), fmt(r.time_us_p99), r.wrong,
             nt[r.size_B].wrong) for r in pairs]
    console.print(table(title, cols, body, left=1))
    console.print("[dim]host launch_us: the time the pipelined loop took to enqueue each call; close to time_us, "
                  "the host's launch cost, not the collective, is what bounds the kit's number[/dim]")


def write_csv(path: Path, rows: list[ResultRow]) -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        fields = row.to_json()
        writer.writerow({k: fields.get(k, "") for k in CSV_COLUMNS})
    return write_text(path, buf.getvalue())


# What the plot draws, in its own words: the line is time_us (nccl-tests' definition: a pipelined loop's
# wall clock / calls), which can sit far from the per-call p50 (at 4 KiB on CPU: 1928 µs against 520).
PNG_YLABEL = "time per all-reduce (µs): line time_us (pipelined loop / calls), band per-call p50..p99"


def write_png(path: Path, rows: list[ResultRow], link: Link | None) -> Path:
    """Latency (time_us, with a per-call p50..p99 band) against size per backend, log-log, with the physical floor."""
    import matplotlib.pyplot as plt

    fig = latency_figure(rows, link)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def latency_figure(rows: list[ResultRow], link: Link | None) -> Figure:
    """The figure write_png saves: one time_us line per backend, its p50..p99 band, the floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    nranks_seen = _plot_groups(ax, rows)
    if nranks_seen and link is not None:
        _plot_floor(ax, rows, link, nranks_seen)
    if nranks_seen:
        _log_axes(ax, rows)
    else:
        ax.text(
            0.5, 0.5, "no backend produced measurements", ha="center", va="center", transform=ax.transAxes
        )
    ax.set_xlabel("message size")
    ax.set_ylabel(PNG_YLABEL, fontsize=8)
    ax.set_title("all-reduce latency vs message size")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def _measured_sizes(rows: list[ResultRow]) -> list[int]:
    return sorted({r.size_B for r in rows if r.status == "ok" and r.size_B is not None})


def _plot_groups(ax: Axes, rows: list[ResultRow]) -> set[int]:
    """One time_us line per backend/profile/ranks/mode with its p50..p99 band; the rank counts drawn."""
    nranks_seen: set[int] = set()
    for (backend, profile, nranks, graph), group in _groups(rows).items():
        ok = sorted((r for r in group if r.status == "ok"), key=lambda r: r.size_B or 0)
        if not ok:
            continue
        nranks_seen.add(nranks)
        label = (
            f"{backend}"
            + (f" [{profile}]" if profile != "-" else "")
            + f", {nranks} rank{'s' if nranks > 1 else ''}"
            + (", graph" if graph else "")
        )
        (line,) = ax.plot([r.size_B for r in ok], [r.time_us for r in ok], marker="o", ms=3, label=label)
        band = [r for r in ok if r.time_us_p50 is not None and r.time_us_p99 is not None]
        if band:  # nccl-tests rows have no per-call spread
            ax.fill_between(
                [r.size_B for r in band],
                [r.time_us_p50 for r in band],
                [r.time_us_p99 for r in band],
                color=line.get_color(),
                alpha=0.15,
            )
    return nranks_seen


def _plot_floor(ax: Axes, rows: list[ResultRow], link: Link, nranks_seen: set[int]) -> None:
    """The physical floor (floor.py) over the measured sizes, one dashed line per rank count."""
    all_sizes = _measured_sizes(rows)
    for n in sorted(nranks_seen):
        ax.plot(
            all_sizes,
            [floor_us(s, n, link) for s in all_sizes],
            "k--",
            lw=1,
            label=f"floor, {link.name}, {n} ranks: 2(n-1)/n·S/{link.gbytes_per_s:g} GB/s + {link.flag_rtt_us:g} µs",
        )


def _log_axes(ax: Axes, rows: list[ResultRow]) -> None:
    """Log-log axes in plain numbers, a tick at every measured size, and the legend."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ticks = _measured_sizes(rows)
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=45, ha="right", fontsize=7)
    ax.legend(fontsize=7)


def write_all(out_dir: Path, rows: list[ResultRow], link: Link | None, plot: bool = True) -> list[Path]:
    """allreduce.json and .csv, and the latency plot unless `plot` is off (--exact-only: nothing timed)."""
    written = [write_json(out_dir / "allreduce.json", [r.to_json() for r in rows]),
               write_csv(out_dir / "allreduce.csv", rows)]
    return [*written, write_png(out_dir / "allreduce.png", rows, link)] if plot else written
