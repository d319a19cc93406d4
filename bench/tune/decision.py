"""The decision rule of `bench tune`: a winner only when it beats, beyond noise, both the runner-up and
the plan that was running when the tune started; otherwise the running plan stays.

**Samples.** The finalists and the running plan are measured in an interleaved schedule
(`interleave`: A B C A B C …, one repeat per slot), so slow drift (thermals, a neighbour's job)
lands on every arm alike. Each repeat gives one objective value.

**Objective.** `tokps` (default): output tok/s of the repeat at concurrency 1, as `bench run`
measures it. `goodput`: at the given concurrency, the requests of a repeat that meet BOTH targets
(TTFT ≤ ttft_ms and TPOT ≤ tpot_ms; a request of one token, which has no TPOT, is judged on TTFT
alone; a failed request never meets them), counted as requests/s (`goodput_unit="req/s"`, the
default: finished-in-target requests / the repeat's wall time) or as tok/s (`"tok/s"`: their output
tokens / the repeat's wall time).

**Rule.** The candidate with the highest mean objective among those that passed the correctness
gate is the contender (a cell that failed the gate, or whose server failed, is never chosen: it is
listed with its reason). It wins only when the percentile bootstrap 95% interval of the difference
of means (contender − other; each arm resampled with replacement, its deviations widened by
sqrt(n/(n-1)) so the interval is not too narrow at small n; 10,000 resamples, seeded) lies
wholly above 0 against the runner-up (the next best correct candidate, when there is one) AND
against the running plan. Otherwise: "no significant difference", and the running plan stays.
A lead must also be worth a switch: the interval's low end must reach `min_gain` (1%) of the other's
mean, so two setups that differ by less (identical ones whose tiny systematic difference a quiet host
resolves, for example) are "no significant difference".
With fewer than `min_repeats` (8) values in any compared arm, or with the running plan not
measured, no winner is declared. Why 8: with equal arms and only the running plan to beat, 6
repeats each still crowned a winner in 6% of seeds, 8 keep it under 5% (tests/test_bench_tune_decision.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
MIN_REPEATS = 8
MIN_GAIN = 0.01  # a lead's interval must clear 1% of the other's mean


def interleave(arms: Sequence[str], repeats: int) -> list[str]:
    """A B A B … (round-robin over `arms`, `repeats` rounds): the order the final repeats run in."""
    if len(set(arms)) != len(arms):
        raise ValueError("arms must be distinct")
    return [arm for _ in range(repeats) for arm in arms]


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

    def __post_init__(self) -> None:
        if self.kind == "goodput" and (self.ttft_ms is None or self.tpot_ms is None):
            raise ValueError("goodput needs both a TTFT and a TPOT target")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    @property
    def unit(self) -> str:
        return "tok/s" if self.kind == "tokps" else f"goodput {self.goodput_unit}"

    def describe(self) -> str:
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


def _resampled_means(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of `resamples` resamples, deviations widened by sqrt(n/(n-1)) so their spread is the sample
    variance's, not the biased (n-1)/n of it (the plain percentile bootstrap is too narrow at small n)."""
    n = len(x)
    dev = x[rng.integers(0, n, (resamples, n))].mean(axis=1) - x.mean()
    return x.mean() + dev * (np.sqrt(n / (n - 1)) if n > 1 else 1.0)


def bootstrap_diff(a: Sequence[float], b: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES,
                   confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): percentile bootstrap interval of the difference of means."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    ma, mb = _resampled_means(xa, rng, resamples), _resampled_means(xb, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ma - mb, [tail, 100.0 - tail])
    return float(xa.mean() - xb.mean()), float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    contender: str
    other: str
    role: str  # "runner-up" or "running plan"
    diff_mean: float
    ci_low: float
    ci_high: float
    n_contender: int
    n_other: int
    significant: bool


@dataclass(frozen=True)
class Decision:
    outcome: Literal["winner", "no significant difference", "no correct candidate"]
    chosen: str  # the winner, or the running plan that stays
    incumbent: str
    contender: str | None
    runner_up: str | None
    objective: str
    rule: str
    means: dict[str, float]
    repeats: dict[str, int]
    comparisons: list[Comparison] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # label -> why it cannot be chosen
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0
    min_gain: float = MIN_GAIN

    def to_json(self) -> dict[str, Any]:
        """As tune.json's `decision`."""
        return asdict(self)


RULE = (
    "winner = highest mean {unit} among cells that passed the correctness gate; it is chosen only if the "
    "{conf:.0%} percentile-bootstrap interval ({resamples} resamples, seed {seed}) of its mean minus the "
    "runner-up's and minus the running plan's both lie above {gain:.0%} of that arm's mean, each arm with at "
    "least {min_repeats} interleaved repeats; otherwise the running plan stays"
)


def decide(
    samples: Mapping[str, Sequence[float]],
    incumbent: str,
    *,
    rejected: Mapping[str, str] | None = None,
    objective: Objective = Objective(),
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    min_repeats: int = MIN_REPEATS,
    min_gain: float = MIN_GAIN,
) -> Decision:
    """Apply the rule (module docstring) to the final interleaved values per candidate label.

    `samples` holds the objective values of every finalist and of `incumbent` (the running plan);
    `rejected` names cells that failed the gate or their switch, with why: they are never chosen."""
    rejected = dict(rejected or {})
    rule = RULE.format(unit=objective.unit, conf=confidence, resamples=resamples, seed=seed, min_repeats=min_repeats,
                       gain=min_gain)
    means = {k: float(np.mean(v)) for k, v in samples.items() if len(v)}
    counts = {k: len(v) for k, v in samples.items()}
    correct = sorted((k for k in means if k not in rejected), key=lambda k: -means[k])
    base = dict(incumbent=incumbent, objective=objective.describe(), rule=rule, means=means, repeats=counts,
                rejected=rejected, resamples=resamples, confidence=confidence, seed=seed, min_gain=min_gain)
    contenders = [k for k in correct if k != incumbent]
    if not contenders:
        return Decision("no correct candidate", incumbent, contender=None, runner_up=None, **base)
    contender = contenders[0]
    runner_up = contenders[1] if len(contenders) > 1 else None
    comparisons = []
    others = [(runner_up, "runner-up")] if runner_up else []
    if incumbent in means:
        others.append((incumbent, "running plan"))
    for i, (other, role) in enumerate(others):
        diff, low, high = bootstrap_diff(samples[contender], samples[other], seed=seed + i, resamples=resamples,
                                         confidence=confidence)
        enough = min(len(samples[contender]), len(samples[other])) >= min_repeats
        comparisons.append(Comparison(contender, other, role, diff, low, high, len(samples[contender]),
                                      len(samples[other]), enough and low > max(0.0, min_gain * means[other])))
    wins = incumbent in means and all(c.significant for c in comparisons)
    if wins:
        return Decision("winner", contender, contender=contender, runner_up=runner_up, comparisons=comparisons,
                        **base)
    return Decision("no significant difference", incumbent, contender=contender, runner_up=runner_up,
                    comparisons=comparisons, **base)
