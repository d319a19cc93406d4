"""bench/sla/record.py: a probe judged from its pooled rows, a cell's entry, speculation against off, sla.json."""

from __future__ import annotations

import json

import pytest

from bench.bundle.cell_numbers import RepeatSummary
from bench.client.request_record import RequestRecord
from bench.sla import record
from bench.sla.record import CellSla, Probe, SlaRecord, Targets
from bench.sla.search import search

TARGETS = Targets(ttft_p99_ms=100.0, tpot_p99_ms=20.0)


def _rows(rate: float, repeat: int, ttfts_ms: list[float], tpot_ms: float = 10.0, tokens: int = 11) -> list[RequestRecord]:
    return [RequestRecord(prompt_id=f"p{i}", ok=True, ttft_s=t / 1000, e2e_s=(t + tpot_ms * (tokens - 1)) / 1000,
                          completion_tokens=tokens, request_rate=rate, repeat=repeat) for i, t in enumerate(ttfts_ms)]


def _rep(rate: float, repeat: int, valid: bool = True) -> RepeatSummary:
    return RepeatSummary(request_rate=rate, repeat=repeat, valid=valid,
                         invalid_reason=None if valid else "1 of 4 requests failed (first: boom)")


def test_a_probe_pools_the_rows_of_its_repeats():
    rows = _rows(2.0, 0, [10, 20, 30, 40]) + _rows(2.0, 1, [50, 60, 70, 500]) + _rows(4.0, 0, [900] * 4)
    p = record.judge(2.0, [_rep(2.0, 0), _rep(2.0, 1), _rep(4.0, 0)], rows, 2, TARGETS, 123.0)
    assert p.met is False and p.ttft_p99_ms == pytest.approx(500 - 0.07 * 430, rel=1e-6)  # linear between ranks
    assert p.tpot_p99_ms == pytest.approx(10.0) and p.output_tps == 123.0 and p.repeats_valid == 2
    assert p.per_user_tps is not None
    p = record.judge(2.0, [_rep(2.0, 0), _rep(2.0, 1)], rows[:7], 2, TARGETS, None)
    assert p.met is True and p.ttft_p99_ms is not None and p.ttft_p99_ms <= 100


def test_tpot_over_its_target_misses():
    rows = _rows(1.0, 0, [10, 10], tpot_ms=30.0)
    assert record.judge(1.0, [_rep(1.0, 0)], rows, 1, TARGETS, None).met is False


def test_an_invalid_or_short_probe_is_invalid_never_met():
    rows = _rows(2.0, 0, [10, 10])
    p = record.judge(2.0, [_rep(2.0, 0), _rep(2.0, 1, valid=False)], rows, 2, TARGETS, None)
    assert p.met is None and "requests failed" in (p.invalid_reason or "")
    p = record.judge(2.0, [_rep(2.0, 0)], rows, 2, TARGETS, None)
    assert p.met is None and p.invalid_reason == "only 1 of 2 repeats ran"


def _cell(spec: str, crossing: float | None, profile: str = "fused", low: float = 0.5, high: float = 64.0,
          tps: dict[float, float] | None = None) -> CellSla:
    out = search(lambda r: crossing is not None and r <= crossing, start=1.0, low=low, high=high, precision=0.1)
    probes = [Probe(rate=s.rate, met=s.met, per_user_tps=(tps or {}).get(s.rate)) for s in out.steps]
    return record.cell_result(cell=f"{profile}+{spec}", profile=profile, spec=spec, spec_params=None, probes=probes,
                              outcome=out, invalid_reason=None)


def test_a_cell_entry_says_which_edge_ended_the_search():
    assert _cell("off", 5.0).status == "found"
    assert _cell("off", None).status == "below_min" and _cell("off", None).max_request_rate is None
    assert _cell("off", 1e9).status == "at_max" and _cell("off", 1e9).max_request_rate == 64.0
    bad = record.cell_result(cell="a+off", profile="a", spec="off", spec_params=None,
                             probes=[Probe(rate=1.0, met=True), Probe(rate=2.0, met=None, invalid_reason="restarted")],
                             outcome=None, invalid_reason=None)
    assert bad.status == "invalid" and bad.max_request_rate is None
    assert bad.invalid_reason == "probe at 2 req/s invalid: restarted"


@pytest.mark.parametrize(("eagle", "off", "helps"), [
    (8.0, 4.0, True), (3.0, 6.0, False), (1e9, 6.0, True), (None, 6.0, False), (5.0, None, True),
    (1e9, 1e9, None), (None, None, None),
])
def test_speculation_helps_when_its_max_rate_is_higher(eagle, off, helps):
    cells = record.with_comparisons([_cell("eagle3", eagle), _cell("off", off)])
    h = cells[0].speculation
    assert h is not None and h.helps is helps and h.against == "fused+off"
    assert cells[1].speculation is None


def test_the_per_user_ratio_is_at_the_lower_max_rate_when_both_probed_it():
    e = _cell("eagle3", 2.5, tps={2.0: 30.0})
    o = _cell("off", 5.0, tps={2.0: 20.0, 4.0: 18.0})
    h = record.helps(e, o)
    assert h is not None and h.helps is False
    assert e.max_request_rate is not None and h.common_rate == e.max_request_rate
    assert h.per_user_ratio is None  # off never probed eagle3's max rate
    e2 = _cell("eagle3", 2.0, tps={2.0: 30.0})
    o2 = _cell("off", 2.0, tps={2.0: 20.0})
    h2 = record.helps(e2, o2)
    assert h2 is not None and h2.helps is None and h2.why == "the same max rate"
    assert h2.common_rate == 2.0 and h2.per_user_ratio == pytest.approx(1.5)


def test_without_an_off_cell_it_cannot_say():
    h = record.with_comparisons([_cell("eagle3", 3.0, profile="ep")])[0].speculation
    assert h is not None and h.helps is None and h.against == "ep+off"


def test_sla_json_reads_back_as_written():
    rec = SlaRecord(targets=TARGETS, precision=0.1, rate_start=1.0, rate_min=0.5, rate_max=64.0, burstiness=1.0,
                    cells=record.with_comparisons([_cell("eagle3", 3.0), _cell("off", 6.0), _cell("ngram", None)]))
    text = json.dumps(rec.to_json())
    again = SlaRecord.model_validate(json.loads(text))
    assert again == rec and json.loads(text)["cells"][1]["max_request_rate"] == rec.cells[1].max_request_rate
    assert again.cells[0].bracket[0] == again.cells[0].max_request_rate
