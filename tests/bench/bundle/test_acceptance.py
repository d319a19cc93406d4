"""bench.bundle.acceptance: acceptance by draft position derived from correct-drafts histograms, pooled over
requests and repeats, and kept in a cell's record (older records without it still load)."""

from __future__ import annotations

import json

import pytest
from helpers_bench import rec

from bench.bundle import acceptance
from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import store as bundle
from bench.bundle.acceptance import Acceptance
from bench.bundle.cell_numbers import RepeatSummary
from bench.bundle.schema import Cell
from launcher.errors import UserError

KNOWN = [10, 20, 30, 40]  # 100 verifies: 10 accepted no draft, 20 one, 30 two, 40 all three


def test_the_rates_follow_from_a_known_histogram():
    a = Acceptance.of(KNOWN)
    assert a is not None and a.verifies == 100
    assert a.accept_length_histogram == {1: 10, 2: 20, 3: 30, 4: 40}
    assert a.position_rates == pytest.approx([0.9, 0.7, 0.4])  # >= 1, >= 2, >= 3 correct drafts
    assert a.conditional_rates == pytest.approx([0.9, 70 / 90, 40 / 70])
    assert a.accept_length == pytest.approx(3.0) == 1 + sum(a.position_rates)
    assert a.accept_length_at(0) == 1.0 and a.accept_length_at(1) == pytest.approx(1.9)
    assert a.accept_length_at(3) == pytest.approx(3.0) and a.accept_length_at(4) is None


def test_rates_never_rise_with_the_position_and_a_position_nobody_reached_has_no_conditional_rate():
    a = Acceptance.of([5, 5, 0, 0])
    assert a.position_rates == [0.5, 0.0, 0.0]
    assert a.conditional_rates == [0.5, 0.0, None]
    assert Acceptance.of([0, 0]) is None and Acceptance.of(None) is None and Acceptance.of([]) is None


def test_pooling_pads_shorter_histograms_and_skips_missing_ones():
    assert acceptance.pool([[1, 2], None, [0, 1, 3]]) == [1, 3, 3]
    assert acceptance.pool([None, None]) is None


def test_of_records_counts_only_ok_requests():
    a = rec("a", 0.1, 1.0, 10, 4, []).model_copy(update={"spec_correct_drafts_histogram": [1, 2, 1]})
    b = rec("b", 0.1, 1.0, 10, 4, [], ok=False).model_copy(update={"spec_correct_drafts_histogram": [9, 9, 9]})
    c = rec("c", 0.1, 1.0, 10, 4, [])  # a server that sent no histogram
    assert acceptance.of_records([a, b, c]) == Acceptance(correct_drafts_histogram=[1, 2, 1])


def test_a_repeat_pools_its_requests_and_a_level_its_valid_repeats():
    rows = [rec(p, 0.1, 1.0, 9, 4, []).model_copy(update={"spec_correct_drafts_histogram": [0, 3, 1]})
            for p in ("a", "b")]
    summary = bundle_aggregate.repeat_summary(rows, 1.0)
    assert summary.spec_correct_drafts_histogram == [0, 6, 2]
    assert summary.to_json()["spec_correct_drafts_histogram"] == [0, 6, 2]
    good = summary.model_copy(update={"valid": True})
    bad = summary.model_copy(update={"valid": False})
    assert acceptance.of_repeats([good, bad, good]) == Acceptance(correct_drafts_histogram=[0, 12, 4])
    assert bad.nulled().spec_correct_drafts_histogram is None  # an invalid repeat keeps no measurement
    assert "spec_correct_drafts_histogram" not in bundle_aggregate.repeat_summary([rec("c", 0.1, 1, 9, None, [])],
                                                                                1.0).to_json()


def test_the_derived_figures_are_written_but_read_again_from_the_histogram():
    a = Acceptance.of(KNOWN)
    data = a.model_dump(mode="json")
    assert data["position_rates"] == pytest.approx([0.9, 0.7, 0.4]) and data["accept_length_histogram"]["4"] == 40
    tampered = {**data, "position_rates": [1.0, 1.0, 1.0], "verifies": 3}
    assert Acceptance.model_validate(tampered) == a


def _cell(**extra) -> dict:
    return {"profile": "fused", "spec": "eagle3", "valid": True, **extra}


def test_a_cell_without_acceptance_loads_and_is_written_without_it(tmp_path):
    path = tmp_path / "fused__eagle3.json"
    path.write_text(json.dumps(_cell(by_concurrency={"1": {"accept_length": 2.0}})))  # as older kits wrote it
    cell = bundle.read_cell(path)
    assert cell.acceptance == {}
    assert "acceptance" not in cell.to_json()


def test_a_cell_with_acceptance_round_trips(tmp_path):
    cell = Cell.model_validate(_cell(acceptance={"1": {"correct_drafts_histogram": KNOWN}}))
    path = bundle.write_cell(tmp_path, cell)
    back = bundle.read_cell(path)
    assert back == cell and back.acceptance["1"].position_rates == pytest.approx([0.9, 0.7, 0.4])
    assert json.loads(path.read_text())["acceptance"]["1"]["verifies"] == 100


@pytest.mark.parametrize(("acceptance_", "field"), [
    ({"1": {"correct_drafts_histogram": [1, "2"]}}, "acceptance.1.correct_drafts_histogram.1"),
    ({"1": {"correct_drafts_histogram": [1, -2]}}, "acceptance.1.correct_drafts_histogram.1"),
    ({"1": {"correct_drafts_histogram": []}}, "acceptance.1.correct_drafts_histogram"),
    ({"0": {"correct_drafts_histogram": [1]}}, "acceptance.0"),
])
def test_a_damaged_acceptance_is_refused_naming_the_key(tmp_path, acceptance_, field):
    path = tmp_path / "fused__eagle3.json"
    path.write_text(json.dumps(_cell(acceptance=acceptance_)))
    with pytest.raises(UserError) as err:
        bundle.read_cell(path)
    assert f"key '{field}" in str(err.value)


def test_a_repeat_with_a_damaged_histogram_is_refused():
    with pytest.raises(ValueError, match="spec_correct_drafts_histogram"):
        RepeatSummary.model_validate({"spec_correct_drafts_histogram": [1, 2.5]})
