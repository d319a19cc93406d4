"""bench.client.request_record: the numbers derived from one measured request (TPOT, tok/s, accept length)."""

from __future__ import annotations

import pytest
from helpers_bench import rec
from pydantic import ValidationError

from bench.client.request_record import RequestRecord


def test_record_derived_metrics():
    r = rec("a", 0.1, 1.1, 101, 50, [0.02] * 49)
    assert r.tpot_s == pytest.approx(0.01)  # (1.1 - 0.1) / 100
    assert r.output_tps == pytest.approx(101 / 1.1)
    assert r.accept_length == pytest.approx(101 / 50)
    assert rec("b", 0.1, 1.0, 10, 0, []).accept_length is None
    assert rec("c", 0.1, 1.0, 10, None, []).accept_length is None
    assert rec("d", 0.1, 0.1, 1, None, []).tpot_s is None


def test_failed_request_has_no_accept_length():
    assert rec("e", 0.1, 1.1, 101, 50, [0.02], ok=False).accept_length is None


def test_the_correct_drafts_histogram_is_written_only_when_measured():
    plain = rec("f", 0.1, 1.1, 10, 4, [0.02] * 3)
    assert "spec_correct_drafts_histogram" not in plain.to_json()  # a row as older kits wrote it
    measured = plain.model_copy(update={"spec_correct_drafts_histogram": [1, 0, 3]})
    row = measured.to_json()
    assert row["spec_correct_drafts_histogram"] == [1, 0, 3]
    assert RequestRecord.model_validate(row) == measured
    assert RequestRecord.model_validate({k: v for k, v in row.items() if k != "spec_correct_drafts_histogram"}) == plain
    with pytest.raises(ValidationError):
        RequestRecord.model_validate({**row, "spec_correct_drafts_histogram": ["1", 0, 3]})
