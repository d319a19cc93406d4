"""Helpers shared by the `nvidia-smi` parsers: ANSI stripping, field splitting, format errors."""

from __future__ import annotations

import re

from launcher.errors import UserError

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Real output separates fields with tabs; copies pasted from terminals use runs of spaces.
_FIELDS = re.compile(r"\t| {2,}")


class FormatError(UserError):
    """Text that is not the `nvidia-smi` output we expected (exit 2 when it came from a file)."""


def strip_ansi(text: str) -> str:
    """nvidia-smi underlines its header row (`ESC[4m ... ESC[0m`) even when piped."""
    return _ANSI.sub("", text).replace("\r", "")


def fields(line: str) -> list[str]:
    """Non-empty, stripped fields of one table line."""
    return [f.strip() for f in _FIELDS.split(line) if f.strip()]


def format_error(source: str, lineno: int, line: str, problem: str, expected: str) -> FormatError:
    """One message naming the source, the line number, the line itself and what was expected."""
    shown = line.replace("\t", "  ").strip()
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return FormatError(f"{source}:{lineno}: {problem}: {shown!r}; expected {expected}")


def table_lines(text: str, source: str, expected: str) -> tuple[list[str], int]:
    """ANSI-stripped lines and the index of the header (the first non-blank line)."""
    lines = strip_ansi(text).splitlines()
    idx = next((i for i, line in enumerate(lines) if line.strip()), None)
    if idx is None:
        raise format_error(source, 1, "", "empty output", expected)
    return lines, idx


def body_rows(lines: list[str], start: int) -> tuple[list[tuple[int, str, list[str]]], int]:
    """(line index, line, fields) of each table row from `start` up to a blank line or the legend,
    and the index where the body stopped."""
    rows = []
    i = start
    while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith("Legend"):
        rows.append((i, lines[i], fields(lines[i])))
        i += 1
    return rows, i
