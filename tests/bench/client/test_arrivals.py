"""bench/client/arrivals.py: open-loop send times drawn from the seed, gamma gaps with mean 1/rate."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest

from bench.client.arrivals import Arrivals, parse_rates, rate_text
from launcher.errors import UserError
from testsupport.stack import REPO


def _gaps(times):
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_the_same_seed_rate_and_repeat_give_the_same_schedule_and_others_do_not():
    a = Arrivals(2.0).schedule(50, seed=1234, repeat=0)
    assert a == Arrivals(2.0).schedule(50, seed=1234, repeat=0)
    assert a[0] == 0.0 and all(y >= x for x, y in zip(a, a[1:], strict=False))
    assert a != Arrivals(2.0).schedule(50, seed=1235, repeat=0)
    assert a != Arrivals(2.0).schedule(50, seed=1234, repeat=1)
    assert a != Arrivals(4.0).schedule(50, seed=1234, repeat=0)


@pytest.mark.stack
def test_another_process_draws_the_same_schedule():
    """Two profiles are measured by one process, but a rerun (or a tune resumed) is another: the schedule may not
    depend on anything a process draws for itself (hash randomisation)."""
    code = "from bench.client.arrivals import Arrivals; print(repr(Arrivals(3.0, 0.5).schedule(20, 7, 2)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == repr(Arrivals(3.0, 0.5).schedule(20, 7, 2))


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_gaps_have_mean_one_over_rate_and_the_gamma_spread_of_the_burstiness(burstiness):
    """Gamma gaps of shape B and mean 1/R have a coefficient of variation 1/sqrt(B): 1 for Poisson."""
    gaps = _gaps(Arrivals(5.0, burstiness).schedule(40_001, seed=99))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 5.0, rel=0.02)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


@pytest.mark.parametrize(("rate", "n"), [(0.5, 2), (3.0, 17), (40.0, 500)])
def test_the_schedule_runs_at_the_rate_asked(rate, n):
    times = Arrivals(rate, 0.3).schedule(n, seed=5)
    assert times[-1] == pytest.approx((n - 1) / rate, rel=1e-12)


def test_short_schedules():
    assert Arrivals(1.0).schedule(0, seed=1) == ()
    assert Arrivals(1.0).schedule(1, seed=1) == (0.0,)


@pytest.mark.parametrize("kwargs", [{"rate": 0}, {"rate": -1}, {"rate": math.inf}, {"rate": math.nan},
                                    {"rate": 1, "burstiness": 0}, {"rate": 1, "burstiness": math.inf},
                                    {"rate": 1, "max_concurrency": 0}])
def test_a_load_that_cannot_be_sent_is_refused(kwargs):
    with pytest.raises(UserError):
        Arrivals(**kwargs)


def test_parse_rates_in_order_without_duplicates():
    assert parse_rates("2, 0.5,2,10") == [2.0, 0.5, 10.0]


@pytest.mark.parametrize("text", ["", " , ", "x", "0", "-1", "inf", "nan", "1,,abc"])
def test_parse_rates_names_the_flag_and_the_fix(text):
    with pytest.raises(UserError) as exc:
        parse_rates(text)
    assert "--request-rate" in str(exc.value)


def test_labels():
    assert rate_text(2.0) == "2" and rate_text(0.25) == "0.25"
    assert Arrivals(2.0).label() == "rate 2 req/s"
    assert Arrivals(2.0, 0.5, 8).label() == "rate 2 req/s, burstiness 0.5, at most 8 in flight"
