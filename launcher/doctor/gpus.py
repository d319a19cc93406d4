"""Parse `nvidia-smi --query-gpu=name,compute_cap,driver_version,pci.bus_id --format=csv`.

Rows come in GPU index order. An `index` column, when the query asked for one, is used instead.
Without a header (`--format=csv,noheader`) the columns are taken in the order of QUERY.
"""

from __future__ import annotations

import csv
import io
import re

from launcher.doctor.textfmt import format_error, strip_ansi
from launcher.profiles.hostfacts import GpuFact

QUERY = ("name", "compute_cap", "driver_version", "pci.bus_id")
COMMAND = ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv"]
EXPECTED = f"CSV from `{' '.join(COMMAND)}` (header: {', '.join(QUERY)})"
_CAP = re.compile(r"^\d+\.\d+$")
_NA = {"[N/A]", "N/A", "[Not Supported]"}


def parse(text: str, source: str = "nvidia-smi --query-gpu") -> list[GpuFact]:
    lines = [(n + 1, line) for n, line in enumerate(strip_ansi(text).splitlines()) if line.strip()]
    if not lines:
        raise format_error(source, 1, "", "empty output", EXPECTED)
    rows = list(csv.reader(io.StringIO("\n".join(line for _, line in lines)), skipinitialspace=True))
    first = [c.strip().lower() for c in rows[0]]
    if "name" in first and "compute_cap" in first:
        columns, body, body_lines = first, rows[1:], lines[1:]
    else:
        columns, body, body_lines = list(QUERY), rows, lines
    missing = [c for c in ("name", "compute_cap") if c not in columns]
    if missing:
        raise format_error(source, lines[0][0], lines[0][1], f"no '{missing[0]}' column", EXPECTED)
    out: list[GpuFact] = []
    for pos, (row, (lineno, line)) in enumerate(zip(body, body_lines, strict=True)):
        if len(row) != len(columns):
            raise format_error(source, lineno, line, f"{len(row)} values, the header has {len(columns)} columns", EXPECTED)
        rec = {c: v.strip() for c, v in zip(columns, row, strict=True)}
        cap = rec.get("compute_cap", "")
        if cap in _NA:
            cap = ""
        elif not _CAP.match(cap):
            raise format_error(source, lineno, line, f"compute_cap '{cap}' is not MAJOR.MINOR", EXPECTED)
        index = rec.get("index", str(pos))
        if not index.isdigit():
            raise format_error(source, lineno, line, f"index '{index}' is not a number", EXPECTED)
        out.append(
            GpuFact(
                index=int(index),
                name=rec.get("name", ""),
                compute_cap=cap,
                driver_version=rec.get("driver_version", ""),
                bus_id=rec.get("pci.bus_id", ""),
            )
        )
    if not out:
        raise format_error(source, lines[0][0], lines[0][1], "a header but no GPU rows", EXPECTED)
    return out
