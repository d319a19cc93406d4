"""bench/tune/tune_state.py: the start plan survives a kill; a finished tune is marked; --fresh keeps the old."""

from __future__ import annotations

import json

from bench.control.production import PlanRef
from bench.tune import tune_state

PLAN = PlanRef.from_json({"name": "baseline", "spec": "off", "spec_params": None, "digest": "abc",
                          "adaptive_tiers": {"1": [1]}, "argv": ["not", "kept"]})
EAGLE = {"name": "fused", "spec": "eagle3", "spec_params": {"steps": 3, "topk": 1, "draft_tokens": 4}, "digest": "d"}


def test_the_start_plan_is_recorded_and_read_back_only_by_the_same_settings(tmp_path):
    kept = tune_state.record(tmp_path, "s1", PLAN)
    assert kept == PlanRef("baseline", "off", None, None, "abc")
    assert tune_state.read(tmp_path, "s1")["start_plan"] == {"name": "baseline", "spec": "off", "spec_params": None,
                                                             "digest": "abc"}
    assert tune_state.read(tmp_path, "other") is None


def test_a_point_is_written_as_its_json_and_read_back_the_same(tmp_path):
    kept = tune_state.record(tmp_path, "s1", PlanRef.from_json(EAGLE))
    text = (tmp_path / tune_state.STATE).read_text()
    assert json.loads(text)["start_plan"] == EAGLE
    assert text == json.dumps({"settings_digest": "s1", "start_plan": EAGLE}, indent=2)
    assert PlanRef.from_json(tune_state.read(tmp_path, "s1")["start_plan"]) == kept


def test_a_damaged_or_foreign_state_reads_as_none(tmp_path):
    assert tune_state.read(tmp_path, "s1") is None  # absent
    (tmp_path / tune_state.STATE).write_text("{not json")
    assert tune_state.read(tmp_path, "s1") is None
    (tmp_path / tune_state.STATE).write_text(json.dumps({"settings_digest": "s1", "start_plan": {"name": ""}}))
    assert tune_state.read(tmp_path, "s1") is None  # no plan name: nothing to go back to


def test_finished_is_marked_with_the_results_folder(tmp_path):
    tune_state.record(tmp_path, "s1", PLAN)
    tune_state.mark_finished(tmp_path, "s1", tmp_path / "run-1")
    data = tune_state.read(tmp_path, "s1")
    assert data["finished"] is True and data["result"] == str(tmp_path / "run-1")
    assert data["start_plan"]["name"] == "baseline"


def test_set_aside_keeps_the_journal_and_state_under_new_names(tmp_path):
    tune_state.record(tmp_path, "s1", PLAN)
    (tmp_path / "journal.jsonl").write_text("{}\n")
    moved = tune_state.set_aside(tmp_path)
    assert [src.name for src, _ in moved] == ["journal.jsonl", tune_state.STATE]
    assert all(dst.exists() and not src.exists() for src, dst in moved)
    assert tune_state.read(tmp_path, "s1") is None and tune_state.set_aside(tmp_path) == []
