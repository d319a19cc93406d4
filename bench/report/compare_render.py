"""How `bench compare` shows its rows: the deltas' table and the gate's (rich), and the deltas as CSV."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from bench.report import tables
from bench.report.deltas import CSV_FIELDS, FDR, DeltaRow
from bench.report.gate_sides import GateRow, GateSide


def _fmt_gate(g: GateSide) -> str:
    em = "—" if g.exact_match_rate is None else f"{g.exact_match_rate:.0%}"
    mean, p99, mx = ("—" if v is None else f"{v:.4f}" for v in (g.mean_delta, g.p99_delta, g.max_delta))
    return (f"{g.status or '—'} (tokens {g.tokens if g.tokens is not None else '—'}, mean {mean}, p99 {p99}, "
            f"max {mx}, exact {em})")


def render_gate(rows: list[GateRow], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "A: verdict (log-probability statistics)", "B: verdict", "same verdict"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.profile, r.spec, _fmt_gate(r.a), _fmt_gate(r.b), "yes" if r.same_verdict else "NO")
    console.print(table)


def _fmt(v: float | None, sd: float | None = None) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if sd is None else f"{v:.2f} ± {sd:.2f}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def render(rows: list[DeltaRow], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "conc", "metric", "A (mean ± sd, n)", "B (mean ± sd, n)", "delta", "delta %",
                "p", "p (BH)", f"significant (FDR {FDR:.0%})"):
        table.add_column(col)
    for r in rows:
        verdict = "YES" if r.significant else "no"
        if r.note:
            verdict += f" — {r.note}"
        if r.load_note:
            verdict += f" — {r.load_note}"
        table.add_row(
            r.profile, r.spec, str(r.concurrency), r.metric,
            f"{_fmt(r.a, r.a_sd)}, {r.a_n}", f"{_fmt(r.b, r.b_sd)}, {r.b_n}",
            _fmt(r.delta), "—" if r.delta_pct is None else f"{r.delta_pct:+.1f}%",
            _fmt_p(r.p_value), _fmt_p(r.p_adjusted), verdict,
        )
    console.print(table)


def csv_text(rows: list[DeltaRow]) -> str:
    return tables.csv_text([r.to_json() for r in rows], CSV_FIELDS)
