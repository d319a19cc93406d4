"""Summary statistics for one run (distribution of per-request values) and across repeats: the numbers a
bundle keeps (bench/bundle/aggregate.py).

Percentiles use linear interpolation between closest ranks (numpy's default, the same method
`sglang.benchmark.serving` uses), so numbers line up with SGLang's own bench. Spread across
repeats is the sample standard deviation (n - 1), 0.0 for a single repeat.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

DIST_STATS = ("mean", "median", "std", "p90", "p99")


def _clean(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The q-th percentile (0..100), or None when there are no values."""
    xs = _clean(values)
    if not xs:
        return None
    return float(np.percentile(xs, q))


def distribution(values: Iterable[float | None]) -> dict[str, float | None]:
    """mean, median, std (population, as SGLang's bench), p90 and p99 of one run's values."""
    xs = _clean(values)
    if not xs:
        return dict.fromkeys(DIST_STATS)
    arr = np.asarray(xs, dtype=float)
    return {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "std": float(arr.std()),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
    }


def mean_sd(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation across repeats; sd is 0.0 for one value, None for none."""
    xs = _clean(values)
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return mean, math.sqrt(var)
