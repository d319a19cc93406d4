"""bench.stats: percentiles, distributions, mean and sample sd across repeats, the spread rule."""

from __future__ import annotations

import numpy as np
import pytest

from bench import stats


def test_percentile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert stats.percentile(xs, 50) == 3.0
    assert stats.percentile(xs, 90) == pytest.approx(7.6)  # 4 + 0.6 * (10 - 4)
    assert stats.percentile(xs, 99) == pytest.approx(float(np.percentile(xs, 99)))
    assert stats.percentile([], 50) is None
    assert stats.percentile([None, 5.0], 50) == 5.0


def test_distribution_keys_and_values():
    d = stats.distribution([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert d["mean"] == 5.0
    assert d["median"] == 4.5
    assert d["std"] == 2.0  # population sd, as sglang.benchmark.serving
    assert d["p90"] == pytest.approx(7.6)
    assert stats.distribution([]) == dict.fromkeys(stats.DIST_STATS)


def test_mean_sd_is_sample_sd_across_repeats():
    mean, sd = stats.mean_sd([80.0, 82.0, 84.0])
    assert mean == 82.0
    assert sd == 2.0  # sqrt(((−2)² + 0 + 2²) / (3 − 1))
    assert stats.mean_sd([5.0]) == (5.0, 0.0)
    assert stats.mean_sd([None, float("nan")]) == (None, None)
    assert stats.fmt_mean_sd(82.0, 2.0) == "82.0 ± 2.0"
    assert stats.fmt_mean_sd(None, None) == "n/a"


def test_spread_rule():
    assert stats.spread_exceeded(5.0, 1.0, 1.0)  # 5 > 2 * sqrt(2) = 2.83
    assert not stats.spread_exceeded(2.0, 1.0, 1.0)
    assert stats.spread_exceeded(-5.0, 1.0, 1.0)
