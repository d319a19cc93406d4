"""Strict JSON numbers for files the kit reads back (state files, bench bundles): NaN and Infinity refused, a
number that overflows a float refused; each a ValueError saying which."""

from __future__ import annotations

import math


def refuse_constant(name: str) -> float:
    """json.loads' parse_constant: NaN, Infinity and -Infinity are not JSON numbers."""
    raise ValueError(f"{name} is not a number JSON allows")


def finite(text: str) -> float:
    """json.loads' parse_float: the number, finite, else ValueError naming it."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} overflows: out of range")
    return value
