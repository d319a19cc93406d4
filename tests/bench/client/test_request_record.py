"""bench.client.request_record: the numbers derived from one measured request (TPOT, tok/s, accept length)."""

from __future__ import annotations

import pytest
from helpers_bench import rec


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
