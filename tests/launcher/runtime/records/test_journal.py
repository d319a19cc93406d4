"""launcher.runtime.records.journal: the switch intent, durable and readable even when damaged."""

from __future__ import annotations

import json

from launcher.runtime.records import journal
from launcher.state_layout import StatePaths

FROM = {"profile": "baseline", "spec": "off", "digest": "a" * 16}
TO = {"profile": "fused", "spec": "eagle3", "digest": "b" * 16}


def test_begin_advance_clear(tmp_path):
    assert journal.read(tmp_path) is None
    j = journal.begin(tmp_path, FROM, TO)
    on_disk = json.loads(StatePaths(tmp_path).journal.read_text())
    assert on_disk["phase"] == "draining" and on_disk["from"] == FROM and on_disk["to"] == TO
    assert oct(StatePaths(tmp_path).journal.stat().st_mode & 0o777) == "0o600"
    journal.advance(tmp_path, j, "health")
    back = journal.read(tmp_path)
    assert back is not None and (back.id, back.phase) == (j.id, "health") and back.to.profile == "fused"
    journal.clear(tmp_path)
    assert journal.read(tmp_path) is None
    journal.clear(tmp_path)  # already gone: fine


def test_a_first_switch_has_no_from(tmp_path):
    journal.begin(tmp_path, None, TO)
    assert journal.read(tmp_path).from_ is None


def test_a_damaged_journal_still_says_a_switch_was_cut_short(tmp_path):
    for text in ("{", "[]", '{"id": 1}', "\xff"):
        StatePaths(tmp_path).journal.write_text(text, encoding="latin-1")
        j = journal.read(tmp_path)
        assert j is not None and j.id.startswith("damaged-") and j.phase == "unknown"


def test_a_switch_cut_short_keeps_its_reason_for_the_next_start(tmp_path):
    j = journal.begin(tmp_path, FROM, TO)
    journal.advance(tmp_path, j, "health")
    journal.cut_short(tmp_path, j, "supervisord stopped answering on s.sock (connection refused)")
    back = journal.read(tmp_path)
    assert (back.id, back.phase, back.cut_short) == (j.id, "health", "supervisord stopped answering on s.sock "
                                                                      "(connection refused)")
    assert "cut_short" not in journal.begin(tmp_path, FROM, TO).record()  # only when set


def test_a_journal_that_is_no_regular_file_is_damaged_and_never_blocks(tmp_path):
    import os

    path = StatePaths(tmp_path).journal
    for make in (os.mkfifo, lambda p: os.symlink("/dev/zero", p)):
        make(path)
        j = journal.read(tmp_path)  # a FIFO would block a plain open; /dev/zero would never end
        assert j is not None and j.phase == "unknown"
        path.unlink()
