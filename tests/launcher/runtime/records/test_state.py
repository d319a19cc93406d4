"""launcher.runtime.records.state: the committed plan, the switch history, JSON state files, server URL and log tail."""

from __future__ import annotations

import json
import os

import pytest
from helpers_profiles import ENV

from launcher.profiles.plan import Plan, build_plan
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.records import state as runtime_state
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
        runtime_state.append_history(tmp_path, {"id": str(i)})
    with open(StatePaths(tmp_path).history, "a") as fh:
        fh.write('{"torn": ')
    hist, skipped = runtime_state.read_history(tmp_path, 20)
    assert [h.id for h in hist] == [str(i) for i in range(5, 25)] and skipped == 1


def test_bug_a_torn_last_line_does_not_swallow_the_next_entry(tmp_path):
    runtime_state.append_history(tmp_path, {"id": "1"})
    with open(StatePaths(tmp_path).history, "a") as fh:
        fh.write('{"id": "2", "outc')  # a crash mid-append
    runtime_state.append_history(tmp_path, {"id": "3"})
    hist, skipped = runtime_state.read_history(tmp_path)
    assert [h.id for h in hist] == ["1", "3"] and skipped == 1


@pytest.mark.parametrize("junk", [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b"null\n", b"[" * 100000 + b"\n"])
def test_bug_damaged_history_lines_are_skipped_and_counted(tmp_path, junk):
    runtime_state.append_history(tmp_path, {"id": "1"})
    with open(StatePaths(tmp_path).history, "ab") as fh:
        fh.write(junk)
    runtime_state.append_history(tmp_path, {"id": "2"})
    hist, skipped = runtime_state.read_history(tmp_path)
    assert [h.id for h in hist] == ["1", "2"] and skipped == 1
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
    assert skipped == 0 and entry.log_tail[-1] == tail[-1] and entry.log_tail_cut == 300 - len(entry.log_tail)


def test_a_fifo_as_history_reads_as_one_skip_without_blocking(tmp_path):
    os.mkfifo(StatePaths(tmp_path).history)
    assert runtime_state.read_history(tmp_path) == ([], 1)
    with pytest.raises(OSError, match="not a regular file"):
        runtime_state.append_history(tmp_path, {"i": 1})


# ----- the one reader of every state file ----------------------------------------------------------------
class _Record(runtime_state.BaseModel):
    n: int
    x: float = 0.0


def _make(path, damage, tmp_path):
    if damage == "symlink":
        (tmp_path / "elsewhere.json").write_text('{"n": 1}')
        path.symlink_to(tmp_path / "elsewhere.json")
    elif damage == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "directory":
        path.mkdir()
    elif damage == "300 MB":
        with open(path, "wb") as fh:
            fh.truncate(300 << 20)
    else:
        path.write_bytes(damage)


@pytest.mark.parametrize("damage, why", [
    ("symlink", "is a symbolic link, not a regular file"),
    ("/dev/zero", "is a symbolic link, not a regular file"),
    ("fifo", "is a FIFO, not a regular file"),
    ("directory", "is a directory, not a regular file"),
    ("300 MB", "holds 314572800 bytes, more than the 4194304"),
    (b'{"n": 1, "x": NaN}', "NaN is not a number JSON allows"),
    (b'{"n": 1, "x": Infinity}', "Infinity is not a number JSON allows"),
    (b'{"n": 1, "x": 1e400}', "the number 1e400 overflows"),
    (b'{"n": "x"}', "key 'n': Input should be a valid integer"),
    (b"\xff", "not UTF-8"),
    (b"[" * 100000, "nested too deep"),
])
def test_a_damaged_state_file_reads_as_absent_with_one_log_line(tmp_path, capsys, damage, why):
    path = tmp_path / "record.json"
    _make(path, damage, tmp_path)
    for _ in range(3):  # /status reads some files at every call: the damage is logged once, not every time
        assert runtime_state.read_record(path, _Record, then="taken as absent") is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: ignoring {path}: ") and why in err[0], err
    assert err[0].endswith("; taken as absent")
    with pytest.raises(runtime_state.Damaged, match=why.replace("(", r"\(")):
        runtime_state.load(path, _Record)


def test_a_file_that_reads_well_again_gets_its_next_damage_logged(tmp_path, capsys):
    path = tmp_path / "record.json"
    assert runtime_state.read_record(path, _Record) is None and capsys.readouterr().err == ""  # absent: no line
    path.write_text('{"n": "x"}')
    runtime_state.read_record(path, _Record)
    path.write_text('{"n": 2}')
    assert runtime_state.read_record(path, _Record).n == 2
    path.write_text('{"n": "x"}')
    runtime_state.read_record(path, _Record)
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_a_history_link_is_never_read_nor_appended_through(tmp_path, capsys):
    victim = tmp_path / "passwd-copy"
    victim.write_text('{"outcome": "switched", "id": "from-the-target"}\n')
    hist = StatePaths(tmp_path).history
    hist.symlink_to(victim)
    assert runtime_state.read_history(tmp_path) == ([], 1)
    assert runtime_state.read_history(tmp_path) == ([], 1)
    assert "is a symbolic link" in runtime_state.history_refusal(tmp_path)
    with pytest.raises(OSError, match="symbolic link"):
        runtime_state.append_history(tmp_path, {"outcome": "switched"})
    assert victim.read_text() == '{"outcome": "switched", "id": "from-the-target"}\n'
    [line] = capsys.readouterr().err.splitlines()
    assert str(hist) in line and "its history reads as empty" in line
    hist.unlink()
    assert runtime_state.history_refusal(tmp_path) is None  # none yet: the append creates a regular file
    runtime_state.append_history(tmp_path, {"outcome": "switched"})
    assert runtime_state.history_refusal(tmp_path) is None


def test_a_history_line_with_nan_is_a_broken_line_and_no_entry_is_written_with_one(tmp_path):
    hist = StatePaths(tmp_path).history
    hist.write_text('{"id": "1", "durations": {"total_s": NaN}}\n{"id": "2"}\n')
    hist_, skipped = runtime_state.read_history(tmp_path)
    assert [h.id for h in hist_] == ["2"] and skipped == 1
    runtime_state.append_history(tmp_path, {"i": 3, "durations": {"total_s": float("inf")}})
    assert json.loads(hist.read_text().splitlines()[-1]) == {"i": 3, "durations": {"total_s": None}}


def test_finite_replaces_every_non_finite_number():
    data = {"a": float("nan"), "b": [1.5, float("-inf"), {"c": float("inf")}], "d": "NaN", "e": 3}
    assert runtime_state.finite(data) == {"a": None, "b": [1.5, None, {"c": None}], "d": "NaN", "e": 3}


def test_adaptive_configs_no_plan_names_are_removed(tmp_path):
    folder = StatePaths(tmp_path).adaptive
    folder.mkdir()
    named, other = "0123456789abcdef.json", "fedcba9876543210.json"
    for name in (named, other, "notes.txt"):
        (folder / name).write_text("{}")

    class P:
        flags = ["--speculative-adaptive-config", str(folder / named)]

    assert runtime_state.prune_adaptive(tmp_path, [P(), None, PLAN]) == [other]
    assert sorted(p.name for p in folder.iterdir()) == [named, "notes.txt"]


def test_history_entries_read_back_as_entries_and_a_line_of_another_shape_is_skipped(tmp_path):
    point = {"steps": 1, "topk": 1, "draft_tokens": 2}
    to = {"profile": "fused", "spec": "eagle3", "spec_params": point, "digest": "d1"}
    runtime_state.append_history(tmp_path, {"id": "a", "outcome": "switched", "to": to})
    runtime_state.append_history(tmp_path, {"id": 5})  # an id that is no string
    runtime_state.append_history(tmp_path, {"outcome": "teleported"})  # no outcome the runtime knows
    runtime_state.append_history(tmp_path, {"to": {"profile": "fused", "spec": "eagle3", "spec_params": {"steps": 0}}})
    (entry,), skipped = runtime_state.read_history(tmp_path)
    assert skipped == 3 and entry.outcome == "switched" and entry.to.spec_params == SpecParams(**point)
    assert entry.to_json()["to"] == to  # the line's own shape, written back
