"""launcher.runtime.journal: the switch intent, durable and readable even when damaged."""

from __future__ import annotations

import json

from launcher.runtime import journal
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
