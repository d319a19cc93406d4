"""bench.bundle.aggregate: per-repeat numbers and their aggregate across repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers_bench import rec

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import summary_stats as stats
from bench.bundle.cell_numbers import Level, RepeatSummary
from bench.client.request_record import RequestRecord


# ----- per-repeat and per-cell numbers -----------------------------------------------------------
def test_repeat_summary_uses_bench_serving_keys_and_raw_gaps():
    recs = [rec("a", 0.1, 1.1, 100, 50, [0.02, 0.04]), rec("b", 0.3, 1.3, 100, 25, [0.06])]
    s = bundle_aggregate.repeat_summary(recs, duration=2.0).to_json()  # as written in a cell's per_repeat
    assert s["completed"] == 2 and s["failed"] == 0
    assert s["total_output_tokens"] == 200
    assert s["output_throughput"] == 100.0
    assert s["request_throughput"] == 1.0
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_itl_ms"] == pytest.approx(40.0)  # raw chunk gaps, not divided by tokens
    assert s["p99_itl_ms"] == pytest.approx(float(np.percentile([20, 40, 60], 99)))
    assert s["accept_length"] == pytest.approx(200 / 75)  # token-weighted over the repeat
    for name in ("ttft", "tpot", "itl", "e2e_latency"):
        for stat in stats.DIST_STATS:
            assert f"{stat}_{name}_ms" in s


def test_aggregate_mean_sd_and_invalid_gives_no_numbers():
    reps = [
        RepeatSummary(repeat=0, valid=True, output_throughput=80.0, completed=4, accept_length_source="meta_info"),
        RepeatSummary(repeat=1, valid=True, output_throughput=84.0, completed=4, accept_length_source="meta_info"),
    ]
    agg = bundle_aggregate.aggregate(reps, valid=True)
    assert agg.value("output_throughput") == 82.0
    assert agg.mean("output_throughput") == 82.0
    assert agg.sd("output_throughput") == pytest.approx(math.sqrt(8))
    assert agg.value("completed") == 8
    assert agg.repeats_valid == 2
    flat = agg.to_json()  # on disk: the bare key, <key>_mean and <key>_sd
    assert (flat["output_throughput"], flat["output_throughput_mean"], flat["completed"]) == (82.0, 82.0, 8)
    assert Level.model_validate(flat) == agg
    bad = bundle_aggregate.aggregate(reps, valid=False)
    assert bad.value("output_throughput") is None and bad.sd("output_throughput") is None
    assert bad.value("completed") is None


# ----- TTFT/TPOT percentiles over the requests of the valid repeats, pooled -----------------------
def _req(repeat, ttft_ms, tpot_ms, concurrency=1, ok=True):
    return RequestRecord.model_validate({"ok": ok, "concurrency": concurrency, "repeat": repeat,
                                         "ttft_s": ttft_ms / 1000, "tpot_s": None if tpot_ms is None else tpot_ms / 1000})


def test_request_percentiles_pool_the_valid_repeats_with_linear_interpolation():
    reps = [RepeatSummary(concurrency=1, repeat=0, valid=True), RepeatSummary(concurrency=1, repeat=1, valid=True),
            RepeatSummary(concurrency=1, repeat=2, valid=False), RepeatSummary(concurrency=2, repeat=0, valid=True)]
    rows = [_req(0, 10, 2), _req(0, 20, 4), _req(0, 30, 6), _req(1, 40, 8), _req(1, 50, 10),
            _req(1, 60, None),  # one token: no TPOT, its TTFT counts
            _req(1, 900, 900, ok=False),  # a failed request
            _req(2, 700, 700),  # an invalid repeat
            _req(0, 500, 500, concurrency=2)]  # another level
    p = bundle_aggregate.request_percentiles(rows, reps, 1)
    # TTFT 10..60 ms: p50 = 35, p90 at rank 4.5 = 55, p99 at rank 4.95 = 59.5
    assert p["ttft_p50_ms"] == pytest.approx(35.0)
    assert p["ttft_p90_ms"] == pytest.approx(55.0)
    assert p["ttft_p99_ms"] == pytest.approx(59.5)
    # TPOT 2..10 ms: p50 = 6, p90 at rank 3.6 = 9.2, p99 at rank 3.96 = 9.92
    assert p["tpot_p50_ms"] == pytest.approx(6.0)
    assert p["tpot_p90_ms"] == pytest.approx(9.2)
    assert p["tpot_p99_ms"] == pytest.approx(9.92)
    assert p["tpot_p90_ms"] == pytest.approx(float(np.percentile([2, 4, 6, 8, 10], 90)))  # numpy's default
    assert list(p) == bundle_aggregate.POOLED_KEYS
    other = bundle_aggregate.request_percentiles(rows, reps, 2)
    assert other["ttft_p50_ms"] == other["ttft_p99_ms"] == pytest.approx(500.0)


def test_request_percentiles_are_none_for_rows_without_repeat_or_values():
    reps = [RepeatSummary(concurrency=1, repeat=0, valid=True)]
    old = [RequestRecord.model_validate({"ok": True, "concurrency": 1, "tpot_s": 0.002})]  # no repeat, no ttft_s
    assert set(bundle_aggregate.request_percentiles(old, reps, 1).values()) == {None}
    no_values = [RequestRecord.model_validate({"ok": True, "concurrency": 1, "repeat": 0})]
    assert set(bundle_aggregate.request_percentiles(no_values, reps, 1).values()) == {None}
    assert set(bundle_aggregate.request_percentiles([_req(0, 10, 2)], [], 1).values()) == {None}


def test_a_repeat_is_written_flat_and_read_back_the_same():
    rep = bundle_aggregate.repeat_summary([rec("a", 0.1, 1.1, 100, 50, [0.02, 0.04])], duration=2.0)
    rep = rep.model_copy(update={"repeat": 0, "concurrency": 4, "valid": True, "pid_before": 7})
    flat = rep.to_json()
    assert flat["mean_ttft_ms"] == pytest.approx(100.0) and "ttft" not in flat and flat["pid_before"] == 7
    assert "tune_phase" not in flat  # only a tune bundle's repeats carry it
    back = RepeatSummary.model_validate(flat)
    assert back == rep and back.ttft.mean == pytest.approx(100.0) and back.to_json() == flat
    gone = back.nulled()  # invalid: counts and identity kept, no measurement
    assert (gone.completed, gone.concurrency, gone.repeat) == (1, 4, 0)
    assert gone.output_throughput is None and gone.ttft.mean is None and gone.accept_length_source is None
