"""Plain result tables for the terminal (rich) and as CSV: one number format and one table shape for every command."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.table import Table


def fmt(value: Any, digits: int = 2, suffix: str = "", sign: bool = False) -> str:
    """'-' for a missing number, fixed digits for a float, str() for anything else."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{'+' if sign else ''}.{digits}f}{suffix}"
    return f"{value}{suffix}"


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1) -> Table:
    """Columns right-aligned except the first `left`; cells are str()-ed (format them with fmt first)."""
    t = Table(title=title)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i < left else "right", no_wrap=i < left)
    for row in rows:
        t.add_row(*(str(c) for c in row))
    return t


def csv_text(rows: Iterable[Mapping[str, object]], fields: Sequence[str]) -> str:
    """The rows as CSV with a header: the named fields in order, others dropped, None as an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    return buf.getvalue()
