"""What a tune maximises (bench/tune/decision.py, **Objective**): a repeat's output tok/s at one concurrency, or
its goodput, the requests (or their tokens) per second that met both a TTFT and a TPOT target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RequestTiming:
    ok: bool
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens: int


@dataclass(frozen=True)
class Repeat:
    """One measured repeat: its tok/s, wall time and (for goodput) each request's timings."""

    tokps: float
    duration_s: float
    requests: tuple[RequestTiming, ...] = ()


@dataclass(frozen=True)
class Objective:
    kind: Literal["tokps", "goodput"] = "tokps"
    concurrency: int = 1
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput_unit: Literal["req/s", "tok/s"] = "req/s"
    # `bench tune --adaptive`: tok/s judged across these concurrency levels at once, a repeat's value the geometric
    # mean of its tok/s at each (bench/tune/levels.py); () judges at `concurrency` alone
    levels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind == "goodput" and (self.ttft_ms is None or self.tpot_ms is None):
            raise ValueError("goodput needs both a TTFT and a TPOT target")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.levels and self.kind != "tokps":
            raise ValueError("an objective across concurrency levels is output tok/s")

    @property
    def unit(self) -> str:
        return "tok/s" if self.kind == "tokps" else f"goodput {self.goodput_unit}"

    def describe(self) -> str:
        if self.levels:
            return f"output tok/s, geometric mean over concurrency {', '.join(str(c) for c in self.levels)}"
        if self.kind == "tokps":
            return f"output tok/s at concurrency {self.concurrency}"
        return (f"goodput ({self.goodput_unit} of requests with TTFT ≤ {self.ttft_ms:g} ms and TPOT ≤ "
                f"{self.tpot_ms:g} ms) at concurrency {self.concurrency}")

    def value(self, rep: Repeat) -> float:
        if self.kind == "tokps":
            return rep.tokps
        return goodput(rep, self.ttft_ms or 0.0, self.tpot_ms or 0.0, self.goodput_unit)


def meets(req: RequestTiming, ttft_ms: float, tpot_ms: float) -> bool:
    if not req.ok or req.ttft_ms is None or req.ttft_ms > ttft_ms:
        return False
    return req.tpot_ms is None or req.tpot_ms <= tpot_ms


def goodput(rep: Repeat, ttft_ms: float, tpot_ms: float, unit: str = "req/s") -> float:
    """Requests/s (or their tok/s) of the repeat's requests that met both targets."""
    if rep.duration_s <= 0:
        return 0.0
    good = [r for r in rep.requests if meets(r, ttft_ms, tpot_ms)]
    amount = sum(r.output_tokens for r in good) if unit == "tok/s" else len(good)
    return amount / rep.duration_s
