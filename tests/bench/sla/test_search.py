"""bench/sla/search.py: the bracketing search against probes with a known crossing."""

from __future__ import annotations

import random

import pytest

from bench.sla.search import Search, rounded, search


def _threshold(crossing: float):
    seen: list[float] = []

    def probe(rate: float) -> bool:
        seen.append(rate)
        return rate <= crossing

    return probe, seen


@pytest.mark.parametrize("crossing", [0.37, 1.0, 1.5, 3.3, 7.9, 12.0, 63.0])
@pytest.mark.parametrize("precision", [0.5, 0.1, 0.02])
def test_the_answer_is_within_precision_below_the_crossing_never_above(crossing, precision):
    probe, seen = _threshold(crossing)
    out = search(probe, start=1.0, low=0.1, high=100.0, precision=precision)
    assert out.status == "found"
    assert out.max_rate is not None and out.max_rate <= crossing
    lo, hi = out.bracket
    assert lo == out.max_rate and hi is not None and hi > crossing
    assert hi / lo <= 1 + precision
    assert crossing / out.max_rate <= 1 + precision
    assert len(seen) == len(set(seen)) == len(out.steps)  # no rate probed twice


def test_doubling_then_bisecting_from_the_start_rate():
    probe, seen = _threshold(5.0)
    search(probe, start=1.0, low=0.1, high=100.0, precision=0.1)
    assert seen[:4] == [1.0, 2.0, 4.0, 8.0]
    assert seen[4] == rounded((4.0 * 8.0) ** 0.5)


def test_halving_while_it_fails():
    probe, seen = _threshold(0.3)
    out = search(probe, start=1.0, low=0.01, high=100.0, precision=0.1)
    assert seen[:3] == [1.0, 0.5, 0.25]
    assert out.bracket[0] is not None and out.bracket[0] <= 0.3 < out.bracket[1]


def test_below_the_lowest_rate():
    probe, seen = _threshold(0.05)
    out = search(probe, start=1.0, low=0.2, high=100.0, precision=0.1)
    assert out.status == "below_min" and out.max_rate is None
    assert out.bracket == (None, 0.2) and seen[-1] == 0.2


def test_at_least_the_highest_rate():
    probe, seen = _threshold(1000.0)
    out = search(probe, start=1.0, low=0.2, high=10.0, precision=0.1)
    assert out.status == "at_max" and out.max_rate == 10.0 and out.bracket == (10.0, None)
    assert seen == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_the_start_is_clamped_into_the_range():
    probe, seen = _threshold(3.0)
    search(probe, start=50.0, low=0.5, high=4.0, precision=0.1)
    assert seen[0] == 4.0
    probe, seen = _threshold(3.0)
    search(probe, start=0.01, low=0.5, high=4.0, precision=0.1)
    assert seen[0] == 0.5


def test_a_crossing_exactly_at_a_probe_counts_as_met():
    probe, _ = _threshold(2.0)
    out = search(probe, start=1.0, low=0.1, high=100.0, precision=0.1)
    assert out.max_rate == 2.0 and out.bracket[1] is not None and out.bracket[1] / 2.0 <= 1.1


def test_low_equal_to_high_probes_once():
    probe, seen = _threshold(3.0)
    assert search(probe, start=1.0, low=2.0, high=2.0, precision=0.1).status == "at_max" and seen == [2.0]
    probe, seen = _threshold(1.0)
    assert search(probe, start=1.0, low=2.0, high=2.0, precision=0.1).status == "below_min" and seen == [2.0]


@pytest.mark.parametrize("seed", range(20))
def test_a_noisy_non_monotone_probe_still_ends_with_a_stated_bracket(seed):
    rng = random.Random(seed)
    out = search(lambda rate: rng.random() < 0.5, start=1.0, low=0.01, high=1000.0, precision=0.05)
    assert len(out.steps) <= 40
    lo, hi = out.bracket
    met = {s.rate for s in out.steps if s.met}
    failed = {s.rate for s in out.steps if not s.met}
    if lo is not None:
        assert lo in met and lo == max(met)
    if hi is not None:
        assert hi in failed and hi == min(failed)
    if lo is not None and hi is not None:
        assert hi / lo <= 1.05 or lo >= hi


def test_a_tiny_precision_ends_at_the_rates_resolution():
    probe, seen = _threshold(3.0)
    out = search(probe, start=1.0, low=0.1, high=100.0, precision=1e-12)
    assert len(seen) < 60 and out.max_rate is not None and out.max_rate <= 3.0 and 3.0 - out.max_rate < 1e-4


@pytest.mark.parametrize(("kw", "word"), [
    ({"low": 0.0}, "low"), ({"low": 5.0, "high": 1.0}, "low <= high"), ({"precision": 0.0}, "precision"),
    ({"start": -1.0}, "start"),
])
def test_bad_bounds_are_refused(kw, word):
    args = {"start": 1.0, "low": 0.1, "high": 10.0, "precision": 0.1, **kw}
    with pytest.raises(ValueError, match=word):
        Search(**args)
