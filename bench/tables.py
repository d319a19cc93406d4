"""Plain result tables for the terminal (rich): one number format and one table shape for every command."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
