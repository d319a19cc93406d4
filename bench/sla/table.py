"""The table `bench sla` prints: one row per cell, its max rate under the SLA and the numbers measured there.

Columns: the cell; its max request rate ("≥ R" at least --rate-max, "< R" below --rate-min); at that rate the
output tok/s (the level's mean over its repeats), the per-user tok/s (median per-request output tok/s, pooled),
the pooled p99 TTFT and p99 TPOT; the correctness verdict; for an eagle3 cell whether speculation helps against
the same profile's off cell (bench/sla/record.py `helps`), with the per-user tok/s ratio at the lower of the two
max rates when both probed it. `--json` prints the same rows as JSON.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from bench import JsonObject
from bench.sla.record import CellSla, Helps, SlaRecord


def max_rate_text(c: CellSla) -> str:
    if c.status == "invalid":
        return "INVALID"
    if c.status == "below_min":
        return f"< {c.bracket[1]:.4g} (below --rate-min)"
    if c.status == "at_max":
        return f"≥ {c.max_request_rate:.4g} (at least --rate-max)"
    return f"{c.max_request_rate:.4g}"


def helps_text(h: Helps | None) -> str:
    if h is None:
        return ""
    word = {True: "yes", False: "no", None: "n/a"}[h.helps]
    text = f"{word} ({h.why})"
    if h.per_user_ratio is not None and h.common_rate is not None:
        text += f"; per user ×{h.per_user_ratio:.2f} at {h.common_rate:.4g} req/s"
    return text


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def row(c: CellSla) -> JsonObject:
    """One cell's row, as `--json` prints it."""
    p = c.at_max
    h = c.speculation
    return {
        "cell": c.cell, "status": c.status, "max_request_rate": c.max_request_rate, "bracket": list(c.bracket),
        "output_tps": p.output_tps if p else None, "per_user_tps": p.per_user_tps if p else None,
        "tokens_per_joule": p.tokens_per_joule if p else None,
        "ttft_p99_ms": p.ttft_p99_ms if p else None, "tpot_p99_ms": p.tpot_p99_ms if p else None,
        "correctness": c.correctness, "probes": len(c.probes), "invalid_reason": c.invalid_reason,
        "speculation_helps": h.helps if h else None, "speculation_why": h.why if h else None,
        "per_user_ratio": h.per_user_ratio if h else None, "ratio_at_rate": h.common_rate if h else None,
    }


def as_json(record: SlaRecord, bundle: str | None) -> str:
    return json.dumps({"bundle": bundle, "simulated": record.simulated, "targets": record.targets.model_dump(),
                       "energy_note": record.energy_note,
                       "precision": record.precision, "cells": [row(c) for c in record.cells]}, indent=2)


WIDTH = 200  # the table's width when stdout is no terminal (a file, a pipe): every column whole


def render(record: SlaRecord, console: Console | None = None) -> None:
    """The table, to stdout (or `console`), and each invalid cell's reason under it."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=WIDTH)
    t = record.targets
    label = "SIMULATED " if record.simulated else ""
    table = Table(title=f"{label}max request rate within p99 TTFT ≤ {t.ttft_p99_ms:g} ms and p99 TPOT ≤ "
                        f"{t.tpot_p99_ms:g} ms (precision {record.precision:g})")
    energy = record.energy_note is None  # tok/J only where the run measured energy
    names = ("cell", "max req/s", "out tok/s", "per-user tok/s", *(("tok/J",) if energy else ()), "p99 TTFT ms",
             "p99 TPOT ms", "correctness", "speculation helps")
    for name in names:
        table.add_column(name, justify="right" if "/s" in name or "ms" in name or "/J" in name else "left")
    for c in record.cells:
        p = c.at_max
        tpj = (_num(p.tokens_per_joule if p else None, 2),) if energy else ()
        table.add_row(c.cell, max_rate_text(c), _num(p.output_tps if p else None),
                      _num(p.per_user_tps if p else None), *tpj, _num(p.ttft_p99_ms if p else None),
                      _num(p.tpot_p99_ms if p else None), c.correctness or "", helps_text(c.speculation))
    console.print(table)
    if not energy:
        console.print(f"no tok/J column: energy not measured ({record.energy_note})", highlight=False, markup=False)
    for c in record.cells:
        if c.invalid_reason:
            console.print(f"{c.cell}: INVALID ({c.invalid_reason})", highlight=False, markup=False, soft_wrap=True)
