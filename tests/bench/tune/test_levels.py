"""bench/tune/levels.py: the repeats the decision judges, at one concurrency level or, under --adaptive, across
every level at once (the geometric mean of a repeat's tok/s), and each level's mean tok/s."""

from __future__ import annotations

import pytest

from bench.bundle.cell_numbers import RepeatSummary
from bench.client.request_record import RequestRecord
from bench.tune import levels
from bench.tune.journal import Entry
from bench.tune.objective import Objective


def _rep(c: int, r: int, tokps: float) -> dict:
    return {"concurrency": c, "repeat": r, "output_throughput": tokps, "duration": 1.0}


def _typed(reps: list[dict]) -> list[RepeatSummary]:
    return [RepeatSummary.model_validate(r) for r in reps]


def _rows(rows: list[dict]) -> list[RequestRecord]:
    return [RequestRecord.model_validate(r) for r in rows]


PER_REPEAT = [_rep(1, 0, 10.0), _rep(4, 0, 40.0), _rep(16, 0, 160.0), _rep(1, 1, 20.0), _rep(4, 1, 40.0)]
ROWS = [{"concurrency": 1, "repeat": 0, "ok": True, "ttft_s": 0.01, "tpot_s": 0.002, "completion_tokens": 5},
        {"concurrency": 4, "repeat": 0, "ok": True, "ttft_s": 0.02, "tpot_s": 0.003, "completion_tokens": 6}]


def test_one_level_judges_that_levels_repeats():
    reps = levels.repeats_of(_typed(PER_REPEAT), _rows(ROWS), Objective(concurrency=1))
    assert [r.tokps for r in reps] == [10.0, 20.0]
    assert reps[0].requests[0].ttft_ms == pytest.approx(10.0) and len(reps[1].requests) == 0


def test_across_levels_a_repeat_is_the_geometric_mean_of_its_levels():
    reps = levels.repeats_of(_typed(PER_REPEAT), _rows(ROWS), Objective(levels=(1, 4, 16)))
    assert len(reps) == 1  # repeat 1 never ran at 16: not judged
    assert reps[0].tokps == pytest.approx(40.0)  # (10 * 40 * 160) ** (1/3)
    assert reps[0].duration_s == 3.0 and len(reps[0].requests) == 2
    assert Objective(levels=(1, 4, 16)).describe() == "output tok/s, geometric mean over concurrency 1, 4, 16"
    with pytest.raises(ValueError):
        Objective("goodput", ttft_ms=1, tpot_ms=1, levels=(1, 4))


def test_a_level_that_served_nothing_makes_the_repeat_zero():
    assert levels.geomean([10.0, 0.0]) == 0.0 and levels.geomean([]) == 0.0


def test_level_means_average_every_ok_repeat_per_level():
    ok = Entry(label="p+off", profile="p", status="ok", plan_digest="", profile_hash="", settings_digest="",
               detail={"cell": {"profile": "p", "spec": "off", "per_repeat": PER_REPEAT}})
    failed = Entry(label="p+off", profile="p", status="failed", plan_digest="", profile_hash="", settings_digest="",
                   detail={"cell": {"profile": "p", "spec": "off", "per_repeat": [_rep(1, 0, 999.0)]}})
    assert levels.level_means([ok, failed]) == {1: 15.0, 4: 40.0, 16: 160.0}
