"""Open-loop arrivals: when each request of an open-loop repeat is sent, at a request rate.

Closed loop (`--concurrency N`) keeps N requests in flight: a new one leaves when one finishes, so requests
never pile up. Open loop (`--request-rate R`) sends on a schedule that does not wait for the server, as users
arrive: when the server is slower than the arrivals, requests queue and their wait is timed as TTFT.

The gaps between arrivals are gamma-distributed with mean 1/R and shape B, `--burstiness`, as vLLM's
`bench serve` defines it (docs/evidence.md, "Open-loop load"): B = 1 is a Poisson process (exponential gaps),
B < 1 burstier, B > 1 more regular. The first request leaves at 0, and the drawn gaps are then scaled so that
the last leaves at (n - 1) / R, as vLLM scales its delays to the rate asked: the schedule's rate is the rate
asked exactly, its shape (how bursty) is the draw's. A rate is finite: "everything at once,
N in flight" is the closed loop's `--concurrency N`.

The schedule is drawn from the run's `--seed`, the rate, the burstiness, the repeat and the number of
requests, and from nothing else: every profile of a run, and a rerun with the same flags, sees the same
arrivals (`schedule`).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from launcher.errors import UserError

DEFAULT_BURSTINESS = 1.0
RATE_RANGE = ("give requests per second, a number above 0 (for every request at once with N in flight, "
              "give --concurrency N)")


@dataclass(frozen=True)
class Arrivals:
    """An open-loop repeat's load: `rate` requests/s, gamma shape `burstiness`, and at most
    `max_concurrency` requests in flight (None: no cap; a request over it waits in the client, as vLLM's)."""

    rate: float
    burstiness: float = DEFAULT_BURSTINESS
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if not (0 < self.rate < math.inf):  # NaN too
            raise UserError(f"--request-rate {self.rate}: {RATE_RANGE}")
        if not (self.burstiness > 0) or math.isinf(self.burstiness):
            raise UserError(f"--burstiness {self.burstiness}: give a number above 0 (1 is Poisson)")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UserError(f"--max-concurrency {self.max_concurrency}: give at least 1, or leave it out")

    def schedule(self, n: int, seed: int, repeat: int = 0) -> tuple[float, ...]:
        """The send time of each of `n` requests, seconds after the repeat starts (non-decreasing, the first 0)."""
        if n < 1:
            return ()
        rng = random.Random(_seed_of(seed, self.rate, self.burstiness, repeat, n))
        scale = 1.0 / (self.rate * self.burstiness)  # mean gap = burstiness * scale = 1 / rate
        out = [0.0]
        for _ in range(n - 1):
            out.append(out[-1] + rng.gammavariate(self.burstiness, scale))
        factor = (n - 1) / self.rate / out[-1] if out[-1] > 0 else 1.0
        return tuple(t * factor for t in out)

    def label(self) -> str:
        """`rate 2 req/s`, with the burstiness and the cap when they are not the defaults."""
        text = f"rate {rate_text(self.rate)} req/s"
        if self.burstiness != DEFAULT_BURSTINESS:
            text += f", burstiness {self.burstiness:g}"
        if self.max_concurrency is not None:
            text += f", at most {self.max_concurrency} in flight"
        return text


def rate_text(rate: float) -> str:
    """A rate as a level key and in labels: `2`, `0.5`."""
    return f"{rate:g}"


def _seed_of(seed: int, rate: float, burstiness: float, repeat: int, n: int) -> int:
    """One integer from everything that decides a schedule (stable across processes, unlike `hash`)."""
    key = f"{seed}|{rate!r}|{burstiness!r}|{repeat}|{n}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def parse_rates(text: str, flag: str = "--request-rate") -> list[float]:
    """`1,2,4.5` -> the rates in order, duplicates dropped; UserError (exit 2) naming the flag otherwise."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise UserError(f"{flag} is empty; give one or more request rates (requests/s), e.g. {flag} 1,2,4")
    out: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise UserError(f"{flag} '{item}': not a number; give requests per second, e.g. {flag} 0.5,1,2") from None
        if not 0 < value < math.inf:
            raise UserError(f"{flag} '{item}': {RATE_RANGE}")
        if value not in out:
            out.append(value)
    return out
