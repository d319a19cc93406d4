"""How sure a difference of means is (bench/tune/decision.py, **Rule** and **Power**): the two-stage percentile
bootstrap interval of one arm's mean minus another's (runs, then their repeats), and the power of the rule at the
spread measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
POWER_GAIN = 0.03  # the gain every decision states its power for
POWER_TARGET = 0.8
MIN_GAIN = 0.01  # a lead's interval must clear 1% of the other's mean


Arm = Sequence[float] | Sequence[Sequence[float]]  # values, or the values of each run (one switch each)


def runs_of(arm: Arm) -> list[np.ndarray]:
    """An arm as its runs: a flat list of values is one run per value (independent repeats); a list of lists
    is the repeats of each run, which share their switch and their stretch of time."""
    if len(arm) and all(isinstance(v, Sequence | np.ndarray) for v in arm):
        return [np.asarray(r, dtype=float) for r in arm if len(r)]  # type: ignore[arg-type]
    return [np.asarray([v], dtype=float) for v in arm]  # type: ignore[list-item]


def flat(arm: Arm) -> list[float]:
    return [float(v) for r in runs_of(arm) for v in r]


def _resampled_means(runs: list[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of `resamples` two-stage resamples: the arm's runs with replacement, then each chosen run's repeats
    with replacement. Repeats of one run share its switch and its stretch of time (a neighbour's burst of load,
    a server that came up a little slower), so they are not independent: resampling whole runs carries the
    spread between runs into the interval. With one value per run this is the plain bootstrap of the values.
    Deviations are widened by sqrt(k/(k-1)) over k runs (sqrt(n/(n-1)) over n repeats when there is one run)
    so their spread is the sample variance's, not the biased (k-1)/k of it."""
    sizes = np.array([len(r) for r in runs])
    centre = float(np.concatenate(runs).mean())
    within = np.stack([r[rng.integers(0, len(r), (resamples, len(r)))].mean(axis=1) for r in runs])  # k x R
    k = len(runs)
    if k == 1:
        n = int(sizes[0])
        return centre + (within[0] - centre) * (np.sqrt(n / (n - 1)) if n > 1 else 1.0)
    pick = rng.integers(0, k, (resamples, k))
    w = sizes[pick]
    means = (within[pick, np.arange(resamples)[:, None]] * w).sum(axis=1) / w.sum(axis=1)
    return centre + (means - centre) * np.sqrt(k / (k - 1))


def bootstrap_diff(a: Arm, b: Arm, *, seed: int = 0, resamples: int = RESAMPLES,
                   confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): percentile bootstrap interval of the difference of means, resampling
    each arm's runs, then their repeats (`_resampled_means`)."""
    ra, rb = runs_of(a), runs_of(b)
    rng = np.random.default_rng(seed)
    ma, mb = _resampled_means(ra, rng, resamples), _resampled_means(rb, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ma - mb, [tail, 100.0 - tail])
    return float(np.concatenate(ra).mean() - np.concatenate(rb).mean()), float(low), float(high)



@dataclass(frozen=True)
class Power:
    """What the final could have found at the spread it measured (running plan against the best finalist)."""

    se: float  # standard error of the difference of means, in the objective's unit
    detectable_gain: float  # the gain (fraction of the running plan's mean) found 80% of the time
    power_at_gain: float  # how often a POWER_GAIN gain would be found
    gain: float = POWER_GAIN

    def describe(self) -> str:
        return (f"a {self.gain:.0%} gain would be found about {self.power_at_gain:.0%} of the time; "
                f"a {self.detectable_gain:.1%} gain 80% of the time")


def _var_of_mean(arm: Arm) -> float:
    """Variance of an arm's mean: from its run means when it has several runs, else from its repeats."""
    runs = runs_of(arm)
    if len(runs) > 1 and any(len(r) > 1 for r in runs):
        means = np.array([r.mean() for r in runs])
        return float(means.var(ddof=1) / len(runs))
    x = np.concatenate(runs) if runs else np.asarray([], dtype=float)
    return float(x.var(ddof=1) / len(x)) if len(x) > 1 else 0.0


def power(a: Arm, b: Arm, *, min_gain: float = MIN_GAIN, gain: float = POWER_GAIN) -> Power:
    """Power of the rule for arm `a` against the running plan `b` at their measured spread (normal approximation)."""
    se, mean = math.sqrt(_var_of_mean(a) + _var_of_mean(b)), float(np.mean(flat(b)))
    z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)
    if se <= 0 or mean <= 0:
        return Power(se, min_gain, 1.0 if gain > min_gain else 0.0, gain)
    detect = min_gain + (z + NormalDist().inv_cdf(POWER_TARGET)) * se / mean
    return Power(se, detect, NormalDist().cdf((gain - min_gain) * mean / se - z), gain)

