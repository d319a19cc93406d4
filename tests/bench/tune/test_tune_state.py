"""bench/tune/tune_state.py: the start plan survives a kill; a finished tune is marked; --fresh keeps the old."""

from __future__ import annotations

import json

from bench.tune import tune_state

PLAN = {"name": "baseline", "spec": "off", "spec_params": None, "digest": "abc", "argv": ["not", "kept"]}


def test_the_start_plan_is_recorded_and_read_back_only_by_the_same_settings(tmp_path):
    kept = tune_state.record(tmp_path, "s1", PLAN)
    assert kept == {"name": "baseline", "spec": "off", "spec_params": None, "digest": "abc"}
    assert tune_state.read(tmp_path, "s1")["start_plan"] == kept
    assert tune_state.read(tmp_path, "other") is None


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
