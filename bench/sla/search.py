"""The search of `bench sla`, as pure logic: the highest request rate whose probe meets the SLA.

A probe measures one rate and says whether it met the targets (bench/sla/probe.py: pooled p99 TTFT and p99
TPOT at or under them); this module only decides which rate to probe next and what the probes found.

Assumption: meeting the targets is monotone in the rate (more load never lowers a p99), so there is one
crossing R*: every rate at or below it meets, every rate above it fails. Under it the search returns a rate
that met, at most a factor 1 + precision below R*, and never a rate above R*.

1. Bracket. Probe `start` (clamped into [low, high]). While probes meet, double (at most `high`); while they
   fail, halve (at least `low`). A probe at `high` that meets ends the search: "at least --rate-max"; one at
   `low` that fails ends it too: "below --rate-min".
2. Bisect geometrically between the highest rate that met (lo) and the lowest that failed (hi): probe
   sqrt(lo * hi) until hi / lo <= 1 + precision.

The answer is lo, the bracket (lo, hi). Every probe after the first lies strictly between lo and hi, so the
probes never contradict each other as seen; a noisy measurement that is not monotone still ends (each
bisection halves log(hi / lo); the doubling and halving are bounded by log2(high / low)), and what the bracket
states is only what was seen: lo met once, hi failed once. Rates are rounded to 6 significant digits (the
level keys of bench/client/arrivals.py `rate_text`); a midpoint that rounds onto lo or hi ends the search.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["found", "below_min", "at_max"]


def rounded(rate: float) -> float:
    """A rate as its level key names it (6 significant digits), so every probe has a key of its own."""
    return float(f"{rate:.6g}")


@dataclass(frozen=True)
class Step:
    """One probe: the rate and whether it met the targets."""

    rate: float
    met: bool


@dataclass(frozen=True)
class Outcome:
    """What the search found: `max_rate` the highest rate that met (None: none did), `bracket` (lo, hi): the highest
    rate that met and the lowest that failed (None where there is none), `status` which edge, if any, ended it."""

    status: Status
    max_rate: float | None
    bracket: tuple[float | None, float | None]
    steps: tuple[Step, ...]


@dataclass
class Search:
    """The bracketing search over [low, high] from `start`, to `precision` (relative); `next_rate()` is the rate
    to probe next (None: done), `record(rate, met)` what its probe found."""

    start: float
    low: float
    high: float
    precision: float
    steps: list[Step] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.high < math.inf):
            raise ValueError(f"rates [{self.low}, {self.high}]: need 0 < low <= high < inf")
        if not (0 < self.precision < math.inf):
            raise ValueError(f"precision {self.precision}: need a number above 0")
        if not (0 < self.start < math.inf):
            raise ValueError(f"start {self.start}: need a number above 0")

    @property
    def lo(self) -> float | None:
        """The highest rate that met."""
        return max((s.rate for s in self.steps if s.met), default=None)

    @property
    def hi(self) -> float | None:
        """The lowest rate that failed."""
        return min((s.rate for s in self.steps if not s.met), default=None)

    def next_rate(self) -> float | None:
        """The next rate to probe; None when the search is done."""
        if not self.steps:
            return rounded(min(max(self.start, self.low), self.high))
        lo, hi = self.lo, self.hi
        if lo is None:
            assert hi is not None
            return None if hi <= self.low else rounded(max(hi / 2, self.low))
        if hi is None:
            return None if lo >= self.high else rounded(min(lo * 2, self.high))
        if lo >= hi or hi / lo <= 1 + self.precision:
            return None
        mid = rounded(math.sqrt(lo * hi))
        return mid if lo < mid < hi else None

    def record(self, rate: float, met: bool) -> None:
        self.steps.append(Step(rate, met))

    def outcome(self) -> Outcome:
        lo, hi = self.lo, self.hi
        status: Status = "below_min" if lo is None else "at_max" if hi is None else "found"
        return Outcome(status, lo, (lo, hi), tuple(self.steps))


def search(probe: Callable[[float], bool], *, start: float, low: float, high: float, precision: float) -> Outcome:
    """Run the search with `probe(rate) -> met` to its end (the synchronous form; `bench sla` drives `Search`
    one measured level at a time)."""
    s = Search(start, low, high, precision)
    while (rate := s.next_rate()) is not None:
        s.record(rate, probe(rate))
    return s.outcome()
