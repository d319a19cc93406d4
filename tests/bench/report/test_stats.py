"""bench.bundle.summary_stats: percentiles, distributions, mean and sample sd across repeats; bench.report.stats:
the incomplete beta function, Student's t, Welch's t-test and Benjamini-Hochberg against known values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.bundle import summary_stats
from bench.report import stats


def test_percentile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert summary_stats.percentile(xs, 50) == 3.0
    assert summary_stats.percentile(xs, 90) == pytest.approx(7.6)  # 4 + 0.6 * (10 - 4)
    assert summary_stats.percentile(xs, 99) == pytest.approx(float(np.percentile(xs, 99)))
    assert summary_stats.percentile([], 50) is None
    assert summary_stats.percentile([None, 5.0], 50) == 5.0


def test_distribution_keys_and_values():
    d = summary_stats.distribution([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert d["mean"] == 5.0
    assert d["median"] == 4.5
    assert d["std"] == 2.0  # population sd, as sglang.benchmark.serving
    assert d["p90"] == pytest.approx(7.6)
    assert summary_stats.distribution([]) == dict.fromkeys(summary_stats.DIST_STATS)


def test_mean_sd_is_sample_sd_across_repeats():
    mean, sd = summary_stats.mean_sd([80.0, 82.0, 84.0])
    assert mean == 82.0
    assert sd == 2.0  # sqrt(((−2)² + 0 + 2²) / (3 − 1))
    assert summary_stats.mean_sd([5.0]) == (5.0, 0.0)
    assert summary_stats.mean_sd([None, float("nan")]) == (None, None)
    assert stats.fmt_mean_sd(82.0, 2.0) == "82.0 ± 2.0"
    assert stats.fmt_mean_sd(None, None) == "n/a"


@pytest.mark.parametrize(("a", "b", "x", "want"), [
    (1.0, 1.0, 0.3, 0.3),  # the uniform distribution
    (2.0, 3.0, 0.4, 0.5248),  # I_x(2, 3) = sum_{j=2..4} C(4, j) x^j (1-x)^(4-j)
    (5.0, 1.0, 0.7, 0.7**5),  # I_x(a, 1) = x^a
    (1.0, 4.5, 0.2, 1 - 0.8**4.5),  # I_x(1, b) = 1 - (1-x)^b
    (0.5, 0.5, 0.25, 2 / math.pi * math.asin(0.5)),  # arcsine: (2/π) asin(√x)
    (7.5, 7.5, 0.5, 0.5),  # symmetric
    (30.0, 0.5, 0.999, None),  # far in the tail: checked through the symmetry below
])
def test_betainc_known_values(a, b, x, want):
    got = stats.betainc(a, b, x)
    if want is not None:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-14)
    assert got + stats.betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-12)
    assert stats.betainc(a, b, 0.0) == 0.0 and stats.betainc(a, b, 1.0) == 1.0


def test_betainc_refuses_what_is_outside_its_domain():
    for a, b, x in ((0.0, 1.0, 0.5), (1.0, -1.0, 0.5), (1.0, 1.0, 1.5), (1.0, 1.0, math.nan), (math.inf, 1.0, 0.5)):
        with pytest.raises(ValueError):
            stats.betainc(a, b, x)


def test_t_distribution_against_tables_and_closed_forms():
    assert stats.t_two_sided_p(2.0, 10) == pytest.approx(0.0734, abs=5e-5)
    assert stats.t_two_sided_p(-2.0, 10) == stats.t_two_sided_p(2.0, 10)
    assert stats.t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=1e-5)  # the table's 97.5% point, df 1
    assert stats.t_two_sided_p(2.228, 10) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(4.303, 2) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(0.0, 3) == 1.0
    assert stats.t_two_sided_p(math.inf, 3) == 0.0 and stats.t_two_sided_p(1e200, 3) == 0.0
    assert stats.t_two_sided_p(1.96, math.inf) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(1.96, 1e7) == pytest.approx(0.05, abs=1e-4)  # large df: the normal
    for t in (-30.0, -3.0, -0.4, 0.0, 0.7, 5.0):
        assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)  # Cauchy
        assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    assert stats.t_cdf(1.5, 3.7) + stats.t_cdf(-1.5, 3.7) == pytest.approx(1.0)  # fractional df (Welch)
    with pytest.raises(ValueError):
        stats.t_two_sided_p(1.0, 0)


def test_welch_t_test():
    w = stats.welch(10.0, 2.0, 5, 13.0, 1.0, 4)
    se = math.sqrt(4 / 5 + 1 / 4)
    assert w.t == pytest.approx(3.0 / se)
    assert w.df == pytest.approx(se**4 / ((4 / 5) ** 2 / 4 + (1 / 4) ** 2 / 3))
    assert w.p == pytest.approx(stats.t_two_sided_p(3.0 / se, w.df))
    assert stats.welch(13.0, 1.0, 4, 10.0, 2.0, 5).p == pytest.approx(w.p)  # sides swapped: t negated
    # equal sds and counts: Student's df 2n - 2
    assert stats.welch(0.0, 1.0, 6, 1.0, 1.0, 6).df == pytest.approx(10.0)
    assert stats.welch(1.0, 0.5, 1, 2.0, 0.5, 3) is None  # a single repeat: no spread
    assert stats.welch(1.0, 0.0, 2, 1.0, 0.0, 2) == stats.Welch(None, None, 1.0)
    assert stats.welch(1.0, 0.0, 2, 2.0, 0.0, 2) == stats.Welch(None, None, 0.0)
    assert stats.welch(1.7e308, 1.0, 2, -1.7e308, 1.0, 2) is None  # B - A overflows: no verdict
    assert stats.welch(1.0, math.nan, 2, 1.0, 1.0, 2) is None


def test_benjamini_hochberg_on_the_1995_papers_example():
    # Benjamini & Hochberg (1995), section 4: 15 p-values; at q = 0.05 the first four are discoveries
    # (Bonferroni's 0.05/15 would keep three).
    ps = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719,
          0.6528, 0.7590, 1.000]
    order = [7, 2, 14, 0, 11, 4, 9, 1, 13, 3, 6, 10, 5, 12, 8]  # the same list shuffled, with untested rows
    shuffled: list[float | None] = [ps[i] for i in order]
    shuffled[5:5] = [None]
    shuffled.append(None)
    rejected, adjusted = stats.benjamini_hochberg(shuffled, 0.05)
    assert sorted(p for p, r in zip(shuffled, rejected, strict=True) if r) == ps[:4]
    assert [r for p, r in zip(shuffled, rejected, strict=True) if p is None] == [False, False]
    assert [a for p, a in zip(shuffled, adjusted, strict=True) if p is None] == [None, None]
    by_p = {p: a for p, a in zip(shuffled, adjusted, strict=True) if p is not None}
    assert by_p[0.0095] == pytest.approx(0.0095 * 15 / 4)
    assert by_p[0.0201] == pytest.approx(0.0201 * 15 / 5)
    assert by_p[0.0278] == pytest.approx(0.0298 * 15 / 7)  # the minimum from above: p_(7)·15/7 < p_(6)·15/6
    assert by_p[1.0] == 1.0


def test_benjamini_hochberg_small_lists():
    # p_(3) = 0.03 <= 3/3·0.05 carries the two below it, though 0.02 and 0.03 exceed 0.05/3
    assert stats.benjamini_hochberg([0.03, 0.01, 0.02]) == ([True, True, True], [pytest.approx(0.03)] * 3)
    assert stats.benjamini_hochberg([0.2, 0.04]) == ([False, False], [pytest.approx(0.2), pytest.approx(0.08)])
    assert stats.benjamini_hochberg([]) == ([], [])
    assert stats.benjamini_hochberg([None]) == ([False], [None])
