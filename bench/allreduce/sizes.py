"""Message sizes and dtypes: parsing `4K,1M,43008` and the default verify-shaped sweep."""

from __future__ import annotations

import re

from launcher.errors import UserError

DTYPES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
"""Element size in bytes per dtype name accepted by --dtype."""

VERIFY_TOKENS: tuple[int, ...] = (1, 2, 3, 4, 8, 16, 32)
"""Tokens per verify pass at batch size 1 (draft tokens + 1 and a few larger batches)."""

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """`4K` -> 4096, `1M` -> 1048576, `43008` -> 43008 (binary units; a trailing B or iB is allowed)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UserError(f"--sizes: '{text}' is not a size; use bytes like 43008, 4K, 64KiB or 1M")
    value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0:
        raise UserError(f"--sizes: '{text}' must be a positive number of bytes")
    return value


def parse_sizes(text: str, dtype: str) -> list[int]:
    """Comma-separated sizes, sorted and de-duplicated; each must be a whole number of elements."""
    elem = DTYPES[dtype]
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise UserError("--sizes: give at least one size, e.g. --sizes 4K,43008,1M")
    for size in sizes:
        if size % elem:
            raise UserError(f"--sizes: {size} B is not a whole number of {dtype} elements ({elem} B each)")
    return sizes


def verify_sizes(hidden: int, dtype: str) -> list[int]:
    """The decode and verify messages alone: VERIFY_TOKENS x hidden x element size (`--exact-only`'s default)."""
    return sorted({t * hidden * DTYPES[dtype] for t in VERIFY_TOKENS})


def default_sizes(hidden: int, dtype: str) -> list[int]:
    """Verify shapes (tokens x hidden x element size) plus a 4 KiB..1 MiB power-of-two sweep."""
    elem = DTYPES[dtype]
    verify = {t * hidden * elem for t in VERIFY_TOKENS}
    sweep = {4096 << i for i in range(9)}  # 4 KiB .. 1 MiB
    return sorted(verify | sweep)


def format_size(size: int) -> str:
    """Short human form used in tables and plot ticks: 43008 -> '42 KiB', 4096 -> '4 KiB'."""
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"
