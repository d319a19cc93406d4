"""Parse `nvidia-smi --query-gpu=index,power.limit,power.default_limit,power.min_limit,power.max_limit
--format=csv,noheader,nounits`: each GPU's power limit, its default and the range it may be set to, in watts.

A field the GPU does not report (`[N/A]`, `[Not Supported]`) is None. A header line, when the output was
saved without `noheader`, is skipped; units (`600.00 W`), when saved without `nounits`, are dropped.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass

from launcher.doctor.textfmt import format_error, strip_ansi

QUERY = ("index", "power.limit", "power.default_limit", "power.min_limit", "power.max_limit")
COMMAND = ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"]
EXPECTED = f"CSV from `{' '.join(COMMAND)}` (columns: {', '.join(QUERY)})"
_NA = {"[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", ""}


@dataclass(frozen=True)
class PowerLimit:
    """One GPU's power limits in watts; None where the GPU does not report one."""

    index: int
    limit_w: float | None
    default_w: float | None
    min_w: float | None
    max_w: float | None

    @property
    def capped(self) -> bool:
        """Set below its default: the GPU runs slower than the same model elsewhere."""
        return self.limit_w is not None and self.default_w is not None and self.limit_w < self.default_w

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """`GPU 0: power limit 600 W (default 600 W, range 150-600 W)`."""
        extra = []
        if self.default_w is not None:
            extra.append(f"default {watts(self.default_w)}")
        if self.min_w is not None or self.max_w is not None:
            extra.append(f"range {_num(self.min_w)}-{watts(self.max_w)}")
        limit = watts(self.limit_w) if self.limit_w is not None else "unknown"
        return f"GPU {self.index}: power limit {limit}" + (f" ({', '.join(extra)})" if extra else "")


def _num(w: float | None) -> str:
    return "?" if w is None else f"{w:g}"


def watts(w: float | None) -> str:
    return f"{_num(w)} W"


def _value(cell: str) -> float | None:
    """`600.00`, `600.00 W` or a not-available marker (None); ValueError for anything else."""
    cell = cell.strip()
    if cell in _NA:
        return None
    return float(cell.removesuffix("W").strip())


def parse(text: str, source: str = "nvidia-smi --query-gpu=index,power.*") -> list[PowerLimit]:
    lines = [(n + 1, line) for n, line in enumerate(strip_ansi(text).splitlines()) if line.strip()]
    if lines and lines[0][1].strip().lower().startswith("index"):
        lines = lines[1:]  # saved with a header
    if not lines:
        raise format_error(source, 1, "", "no GPU rows", EXPECTED)
    out: list[PowerLimit] = []
    for lineno, line in lines:
        row = next(csv.reader([line], skipinitialspace=True))
        if len(row) != len(QUERY):
            raise format_error(source, lineno, line, f"{len(row)} values, the query has {len(QUERY)}", EXPECTED)
        if not row[0].strip().isdigit():
            raise format_error(source, lineno, line, f"index '{row[0].strip()}' is not a number", EXPECTED)
        try:
            limit, default, low, high = (_value(c) for c in row[1:])
        except ValueError:
            raise format_error(source, lineno, line, "a power value is not a number of watts", EXPECTED) from None
        out.append(PowerLimit(int(row[0]), limit, default, low, high))
    return out

