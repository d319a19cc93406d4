"""bench.bundle_aggregate: per-repeat numbers and their aggregate across repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers_bench import rec

from bench import bundle_aggregate, stats


# ----- per-repeat and per-cell numbers -----------------------------------------------------------
def test_repeat_summary_uses_bench_serving_keys_and_raw_gaps():
    recs = [rec("a", 0.1, 1.1, 100, 50, [0.02, 0.04]), rec("b", 0.3, 1.3, 100, 25, [0.06])]
    s = bundle_aggregate.repeat_summary(recs, duration=2.0)
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
        {"repeat": 0, "valid": True, "output_throughput": 80.0, "completed": 4, "accept_length_source": "meta_info"},
        {"repeat": 1, "valid": True, "output_throughput": 84.0, "completed": 4, "accept_length_source": "meta_info"},
    ]
    agg = bundle_aggregate.aggregate(reps, valid=True)
    assert agg["output_throughput"] == 82.0
    assert agg["output_throughput_mean"] == 82.0
    assert agg["output_throughput_sd"] == pytest.approx(math.sqrt(8))
    assert agg["completed"] == 8
    assert agg["repeats_valid"] == 2
    bad = bundle_aggregate.aggregate(reps, valid=False)
    assert bad["output_throughput"] is None and bad["output_throughput_sd"] is None
    assert bad["completed"] is None
