"""launcher.runtime.state: the committed plan, the switch history, JSON state files, server URL and log tail."""

from __future__ import annotations

import json
import os

import pytest
from helpers_profiles import ENV

from launcher.profiles.plan import Plan, build_plan
from launcher.runtime import state as runtime_state
from launcher.state_layout import COMMITTED_FILE, HISTORY_FILE, StatePaths


def test_file_names_come_from_settings(tmp_path):
    runtime_state.commit(tmp_path, PLAN)
    runtime_state.append_history(tmp_path, {"outcome": "started"})
    assert (tmp_path / COMMITTED_FILE).is_file() and (tmp_path / HISTORY_FILE).is_file()


def test_a_stored_plan_reads_back_as_the_same_typed_plan(tmp_path):
    runtime_state.commit(tmp_path, PLAN)
    record = runtime_state.committed(tmp_path)
    assert isinstance(record.plan, Plan) and record.plan == PLAN and record.plan.digest() == PLAN.digest()
    assert record.plan.server_url == PLAN.server_url


def test_a_stored_digest_is_recomputed_never_trusted(tmp_path):
    StatePaths(tmp_path).committed.write_text(json.dumps({"committed_at": 1.0, "plan": {**PLAN_JSON, "digest": "forged"}}))
    assert runtime_state.committed(tmp_path).plan.digest() == PLAN.digest() != "forged"


def test_rendered_plan_is_none_when_absent_or_damaged(tmp_path):
    assert runtime_state.rendered_plan(tmp_path) is None
    StatePaths(tmp_path).profile_json.write_text(json.dumps({**PLAN_JSON, "server_url": 7}))
    assert runtime_state.rendered_plan(tmp_path) is None
    StatePaths(tmp_path).profile_json.write_text(json.dumps(PLAN_JSON))
    assert runtime_state.rendered_plan(tmp_path) == PLAN


PLAN = build_plan("fused", "eagle3", environ=ENV)
PLAN_JSON = PLAN.to_json()


def test_history_keeps_last_entries_and_counts_broken_lines(tmp_path):
    assert runtime_state.read_history(tmp_path) == ([], 0)  # no file yet
    for i in range(25):
        runtime_state.append_history(tmp_path, {"i": i})
    with open(StatePaths(tmp_path).history, "a") as fh:
        fh.write('{"torn": ')
    hist, skipped = runtime_state.read_history(tmp_path, 20)
    assert [h["i"] for h in hist] == list(range(5, 25)) and skipped == 1


def test_bug_a_torn_last_line_does_not_swallow_the_next_entry(tmp_path):
    runtime_state.append_history(tmp_path, {"i": 1})
    with open(StatePaths(tmp_path).history, "a") as fh:
        fh.write('{"i": 2, "outc')  # a crash mid-append
    runtime_state.append_history(tmp_path, {"i": 3})
    hist, skipped = runtime_state.read_history(tmp_path)
    assert [h["i"] for h in hist] == [1, 3] and skipped == 1


@pytest.mark.parametrize("junk", [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b"null\n", b"[" * 100000 + b"\n"])
def test_bug_damaged_history_lines_are_skipped_and_counted(tmp_path, junk):
    runtime_state.append_history(tmp_path, {"i": 1})
    with open(StatePaths(tmp_path).history, "ab") as fh:
        fh.write(junk)
    runtime_state.append_history(tmp_path, {"i": 2})
    hist, skipped = runtime_state.read_history(tmp_path)
    assert [h["i"] for h in hist] == [1, 2] and skipped == 1
    assert oct(StatePaths(tmp_path).history.stat().st_mode & 0o777) == "0o600"


def test_commit_is_atomic_json(tmp_path):
    assert runtime_state.committed(tmp_path) is None
    runtime_state.commit(tmp_path, PLAN)
    data = json.loads(StatePaths(tmp_path).committed.read_text())
    assert data["plan"]["name"] == "fused"
    assert isinstance(data["committed_at"], float)
    assert runtime_state.committed(tmp_path).model_dump(mode="json")["plan"]["name"] == data["plan"]["name"]
    assert runtime_state.committed(tmp_path).committed_at == data["committed_at"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert oct(StatePaths(tmp_path).committed.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("record", "key"),
    [
        ({"plan": None, "committed_at": 1.0}, "plan"),
        ({"plan": {**PLAN_JSON, "argv": []}, "committed_at": 1.0}, "plan.argv"),
        ({"plan": {**PLAN_JSON, "env": {"A": 1}}, "committed_at": 1.0}, "plan.env.A"),
        ({"plan": {k: v for k, v in PLAN_JSON.items() if k != "server_url"}, "committed_at": 1.0}, "plan.server_url"),
        ({"plan": PLAN_JSON}, "committed_at"),
        ([PLAN_JSON], "(top level)"),
    ],
)
def test_bug_a_wrongly_shaped_commit_record_is_ignored_with_a_warning(tmp_path, capsys, record, key):
    StatePaths(tmp_path).committed.write_text(json.dumps(record))
    assert runtime_state.committed(tmp_path) is None
    err = capsys.readouterr().err
    assert "warning: ignoring" in err and f"key '{key}'" in err


def test_read_json_of_a_rendered_plan(tmp_path):
    path = StatePaths(tmp_path).profile_json
    path.write_text('{"name": "fused", "spec": "eagle3"}')
    assert runtime_state.read_json(path) == {"name": "fused", "spec": "eagle3"}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"', ""])
def test_read_json_missing_or_malformed_is_none(tmp_path, text):
    path = StatePaths(tmp_path).profile_json
    assert runtime_state.read_json(path) is None
    path.write_text(text)
    assert runtime_state.read_json(path) is None


def test_tail_reads_last_lines(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    assert runtime_state.tail(log, 3) == ["line 197", "line 198", "line 199"]
    assert runtime_state.tail(tmp_path / "missing.log") == []


def test_a_huge_log_tail_is_cut_so_the_entry_stays_readable(tmp_path):
    tail = ["\ufffd" * 1000 + f" line {i}" for i in range(300)]  # ~900 KiB escaped, ~900 KiB raw
    runtime_state.append_history(tmp_path, {"id": "a", "outcome": "rolled_back", "log_tail": tail})
    line = StatePaths(tmp_path).history.read_bytes()
    assert len(line) <= runtime_state.MAX_HISTORY_LINE_BYTES + 1
    (entry,), skipped = runtime_state.read_history(tmp_path)
    assert skipped == 0 and entry["log_tail"][-1] == tail[-1] and entry["log_tail_cut"] == 300 - len(entry["log_tail"])


def test_a_fifo_as_history_reads_as_one_skip_without_blocking(tmp_path):
    os.mkfifo(StatePaths(tmp_path).history)
    assert runtime_state.read_history(tmp_path) == ([], 1)
    with pytest.raises(OSError, match="not a regular file"):
        runtime_state.append_history(tmp_path, {"i": 1})
