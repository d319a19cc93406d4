"""summary.md's "Acceptance by draft position" section and acceptance.csv: per cell and load (each concurrency
level, each open-loop rate), the
share of verify passes that accepted each draft position, and the verifies by tokens accepted. Only cells whose
record carries acceptance (bench/bundle/acceptance.py; bench/bundle/schema.py `Cell.acceptance`) appear; a bundle
with none gets neither the section nor the file."""

from __future__ import annotations

from bench.bundle import names as bundle_names
from bench.bundle.acceptance import Acceptance
from bench.bundle.schema import Cell
from bench.report import tables

CSV_FILE = "acceptance.csv"
CSV_FIELDS = ("profile", "spec", "spec_params", "concurrency", "request_rate", "verifies", "accept_length", "correct_drafts",
              "tokens_accepted", "verifies_at", "position_rate", "conditional_rate")


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _loads(cell: Cell) -> list[tuple[str, Acceptance]]:
    """(load, acceptance): the concurrency levels (`c=4`), then the open-loop rates (`rate=2`)."""
    return ([(f"c={k}", a) for k, a in cell.acceptance.items()]
            + [(f"rate={k}", a) for k, a in cell.acceptance_by_rate.items()])


def _cell_lines(cell: Cell) -> list[str]:
    """One cell's table: a row per load, a column per draft position (rate, conditional rate in brackets)."""
    loads = _loads(cell)
    width = max(len(a.position_rates) for _, a in loads)
    head = " | ".join(f"pos {i}" for i in range(1, width + 1))
    lines = [f"{cell.label}:", "",
             f"| load | verifies | accept length | {head} | verifies by tokens accepted (1 / 2 / ...) |",
             "|---|---:|---:|" + "---:|" * width + "---|"]
    for level, a in loads:
        rates = [f"{_rate(r)} ({_rate(c)})" for r, c in zip(a.position_rates, a.conditional_rates, strict=True)]
        rates += ["—"] * (width - len(rates))
        hist = " / ".join(str(n) for n in a.accept_length_histogram.values())
        lines.append(f"| {level} | {a.verifies} | {tables.fmt(a.accept_length)} | {' | '.join(rates)} | {hist} |")
    return [*lines, ""]


def markdown_lines(cells: list[Cell]) -> list[str]:
    """The section, or nothing when no cell carries acceptance."""
    with_it = [c for c in cells if c.acceptance or c.acceptance_by_rate]
    if not with_it:
        return []
    lines = ["", "## Acceptance by draft position", "",
             "Share of verify passes that accepted each draft position (in brackets: of those that accepted the "
             "position before it), from the servers' per-request `spec_correct_drafts_histogram`, pooled over the "
             "valid repeats. Exact for a chain (top-k 1); with top-k > 1, the i-th token of the accepted path. "
             "accept length = 1 + the sum of the rates.", ""]
    for cell in with_it:
        lines += _cell_lines(cell)
    return lines[:-1]


def _rows(cell: Cell, load: str, a: Acceptance) -> list[dict[str, object]]:
    point = bundle_names.point_text(cell.spec_params)
    rates = [None, *a.position_rates]
    conditional = [None, *a.conditional_rates]
    return [{"profile": cell.profile, "spec": cell.spec + point, "spec_params": point[1:-1] or None,
             "concurrency": int(load[2:]) if load.startswith("c=") else None,
             "request_rate": float(load[5:]) if load.startswith("rate=") else None, "verifies": a.verifies, "accept_length": a.accept_length,
             "correct_drafts": k, "tokens_accepted": k + 1, "verifies_at": n, "position_rate": rates[k],
             "conditional_rate": conditional[k]}
            for k, n in enumerate(a.correct_drafts_histogram)]


def csv_text(cells: list[Cell]) -> str | None:
    """acceptance.csv: a row per (cell, level, correct drafts k), with the rate of draft position k (empty at
    k = 0); None when no cell carries acceptance."""
    rows = [row for c in cells for load, a in _loads(c) for row in _rows(c, load, a)]
    return tables.csv_text(rows, CSV_FIELDS) if rows else None
