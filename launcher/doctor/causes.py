"""Findings grouped by cause, and plain-text layout for narrow terminals.

A cause is one rule saying one thing (same level, rule and text): `launcher check` and
`launcher doctor` print it once, with the profiles (and spec modes) it applies to, instead of once
per profile. Numbers are given in order of first appearance, so a table or a list can point at a
cause ("see [2]") and print its text once below.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Cause:
    number: int
    level: str
    text: str
    # subject (a profile) -> the variants it was found under (spec modes, model overlays), in order
    where: dict[str, list[str]] = field(default_factory=dict)

    def subjects(self) -> list[str]:
        return list(self.where)


class Causes:
    """Causes in order of first appearance; `add` returns the cause a finding belongs to."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str, str], Cause] = {}

    def add(self, level: str, rule: str, text: str, subject: str, variant: str = "") -> Cause:
        key = (level, rule, text)
        cause = self._by_key.get(key)
        if cause is None:
            cause = self._by_key[key] = Cause(len(self._by_key) + 1, level, text)
        variants = cause.where.setdefault(subject, [])
        if variant and variant not in variants:
            variants.append(variant)
        return cause

    def __iter__(self) -> Iterator[Cause]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)


def applies_to(where: dict[str, list[str]], combos: int, every: str = "every spec mode") -> str:
    """`a, b (every spec mode); c + off`: the plans a cause applies to, short. `combos` is how many
    variants each subject was checked under; a subject found under all of them is named alone."""
    whole = [name for name, modes in where.items() if len(modes) >= combos]
    parts = [", ".join(whole) + (f" ({every})" if combos > 1 else "")] if whole else []
    parts += [f"{name} + {'/'.join(modes)}" for name, modes in where.items() if name not in whole]
    return "; ".join(parts)


NARROW_BELOW = 100
"""Columns under which the doctor prints one item per line instead of bordered tables: a four-column
table at 80 columns wraps every cell into a narrow strip (and splits commands meant to be copied)."""


def narrow(width: int) -> bool:
    return width < NARROW_BELOW


# A profile's [requires] refusal (rule host_requirements, keyed by the fact) and a backend rule's
# refusal of the same profile can name the same host fact in other words: symm-mem is refused by
# its [requires] ("needs SM 9.0, 10.0, host has 12.0") and by symm_mem_eligibility ("torch symm-mem
# needs SM 9.x/10.x, this host has SM 12.0; pick another profile"). The backend rule's text says
# why and what to do, so the [requires] refusal it restates is left out. The words name the fact.
REQUIRES_FACT_WORDS: dict[str, tuple[str, ...]] = {
    "requires.sm": ("SM ",),
    "requires.interconnect": ("NVLink", "PCIe-only"),
    "requires.nvlink_multicast": ("NVLink multicast",),
    "requires.p2p": ("peer-to-peer", "P2P "),
}
REQUIRES_RULE = "host_requirements"


def drop_restated(findings: list) -> list:
    """`findings` without the [requires] refusals another refusal of the same profile restates."""
    others = [f.message for f in findings if f.level == "ineligible" and f.rule != REQUIRES_RULE]

    def restated(f) -> bool:
        words = REQUIRES_FACT_WORDS.get(f.key, ()) if f.rule == REQUIRES_RULE and f.level == "ineligible" else ()
        return any(w in m for m in others for w in words)

    return [f for f in findings if not restated(f)]
