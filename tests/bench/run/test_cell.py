"""bench.run.cell and bundle_schema.Cell: a cell's record is built once from its repeats, written whole, read back the same."""

from __future__ import annotations

import json

import pytest
from helpers_bench import rec

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import store as bundle
from bench.bundle.cell_numbers import RepeatSummary
from bench.bundle.schema import Cell, Correctness
from bench.run import logprob_gate
from bench.run.cell import apply_gate, close_cell, new_cell, record_plan
from bench.run.logprob_gate import TokenLogprob
from bench.run.passes import Reply
from bench.run.settings import RunSettings
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles.spec_params import SpecParams

POINT = SpecParams(steps=1, topk=1, draft_tokens=2)


def settings(**kw) -> RunSettings:
    return RunSettings(url="http://127.0.0.1:1", out="unused", repeats=2, concurrency=[1, 4], num_prompts=2, **kw)


def repeat(c: int, r: int, duration: float, valid: bool = True, reason: str | None = None) -> RepeatSummary:
    """One repeat's summary as bench/run/repeat.py makes it, two requests of 100 tokens."""
    rep = bundle_aggregate.repeat_summary([rec("a", 0.1, 1.1, 100, 50, [0.02]), rec("b", 0.2, 1.2, 100, 40, [0.03])],
                                          duration)
    return rep.model_copy(update=dict(repeat=r, concurrency=c, valid=valid, invalid_reason=reason, server_start_time=1.0,
                                      restarts_before=0, restarts_after=0, client_cpu_us_per_chunk=12.0))


def measured(s: RunSettings, durations: dict[int, list[float]], spec_params=None):
    draft = new_cell(profile="fused", spec="eagle3", settings=s, num_prompts=2, spec_params=spec_params)
    record_plan(draft, {"digest": "d1", "setup_digest": "s1", "local": {"port": "30000"},
                        "spec_params": spec_params.model_dump() if spec_params else None})  # /plan's JSON
    draft.switch = {"outcome": "switched", "http_status": 200, "error": None, "durations": {}}
    draft.server, draft.backends, draft.simulated = {"version": "0.5.23"}, [], True
    for c, ds in durations.items():
        draft.per_repeat += [repeat(c, r, d) for r, d in enumerate(ds)]
    return draft


def test_a_cell_is_built_from_its_repeats():
    cell = close_cell(measured(settings(), {1: [2.0, 4.0], 4: [1.0, 1.0]}), concurrency=[1, 4], repeats=2)
    assert cell.valid is True and cell.invalid_reason is None
    assert list(cell.by_concurrency) == ["1", "4"]
    one, four = cell.level(1), cell.level("4")
    assert one.mean("output_throughput") == pytest.approx((100.0 + 50.0) / 2)  # 200 tokens in 2 s, then 4 s
    assert one.value("completed") == 4 and one.repeats_valid == 2 and one.to_json()["concurrency"] == 1
    assert four.mean("output_throughput") == pytest.approx(200.0)
    assert one.accept_length_source == "meta_info"
    assert cell.correctness.status == "pending"
    assert (cell.plan_digest, cell.setup_digest, cell.local) == ("d1", "s1", {"port": "30000"})
    assert (cell.repeats, cell.concurrency_levels, cell.num_prompts, cell.warmup) == (2, [1, 4], 2, 2)
    assert cell.requests_file == "fused__eagle3.requests.jsonl" and len(cell.per_repeat) == 4
    data = cell.to_json()  # the first level's numbers also at the top level, as on disk
    assert data["output_throughput"] == data["by_concurrency"]["1"]["output_throughput"] == pytest.approx(75.0)
    assert data["concurrency"] == 1 and data["completed"] == 4 and isinstance(data["completed"], int)


def test_an_invalid_repeat_makes_the_cell_invalid_with_its_reason_and_no_numbers():
    draft = measured(settings(), {1: [2.0], 4: [1.0, 1.0]})
    draft.per_repeat.append(repeat(1, 1, 2.0, valid=False, reason="1 of 2 requests failed (first: boom)"))
    cell = close_cell(draft, concurrency=[1, 4], repeats=2)
    assert cell.valid is False
    assert cell.invalid_reason == "1 of 4 repeats invalid: 1 of 2 requests failed (first: boom)"
    data = cell.to_json()
    for level in data["by_concurrency"].values():
        numbers = {k: v for k, v in level.items() if k not in ("concurrency", "repeats_valid")}
        assert numbers and all(v is None for v in numbers.values()), numbers
    assert data["output_throughput"] is None and data["mean_tpot_ms_sd"] is None and data["valid"] is False


def test_missing_repeats_and_a_stopped_cell_are_invalid():
    short = close_cell(measured(settings(), {1: [2.0, 2.0], 4: [1.0]}), concurrency=[1, 4], repeats=2)
    assert short.valid is False and short.invalid_reason == "only 3 of 4 repeats ran"
    draft = measured(settings(), {})
    draft.invalid_reason = "switch rolled_back: server exited during start-up"
    stopped = close_cell(draft, concurrency=[1, 4], repeats=2)
    assert stopped.valid is False and stopped.invalid_reason == draft.invalid_reason
    assert stopped.level(1).value("output_throughput") is None and stopped.level(1).repeats_valid == 0


def test_no_switch_is_recorded_and_a_point_names_the_cell():
    cell = close_cell(measured(settings(no_switch=True), {1: [1.0, 1.0], 4: [1.0, 1.0]}, POINT),
                      concurrency=[1, 4], repeats=2)
    assert cell.spec_params == POINT and cell.plan_spec_params == POINT
    assert cell.key == "fused__eagle3__1-1-2" and cell.label == "fused+eagle3(1,1,2)"
    assert cell.requests_file == "fused__eagle3__1-1-2.requests.jsonl"
    assert new_cell(profile="p", spec="off", settings=settings(no_switch=True), num_prompts=1).switch == {
        "outcome": "skipped (--no-switch)"}


def test_round_trip_write_then_read_gives_the_same_record(tmp_path):
    cell = close_cell(measured(settings(), {1: [2.0, 4.0], 4: [1.0, 1.5]}, POINT), concurrency=[1, 4], repeats=2)
    cell = cell.with_correctness(Correctness.model_validate({
        "status": "FAIL", "reasons": ["exact match 50% < 90%"], "exact_match_rate": 0.5, "first_divergence": 3,
        "baseline": "baseline+eagle3", "compared": 2}))
    path = bundle.write_cell(tmp_path, cell)
    assert path.name == "fused__eagle3__1-1-2.json"
    back = bundle.read_cell(path)
    assert isinstance(back, Cell) and back == cell
    assert back.correctness.model_extra == {"baseline": "baseline+eagle3", "compared": 2}
    assert json.loads(path.read_text()) == cell.to_json() == back.to_json()


def test_the_record_is_frozen_and_the_gate_gives_new_records(tmp_path):
    base = close_cell(measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]}), concurrency=[1, 4], repeats=2)
    with pytest.raises(ValueError, match="frozen"):
        base.valid = False
    rows = [Reply(f"p{i}", 1, "same", [TokenLogprob(t, -0.5, {t: -0.5}) for t in range(50)]) for i in range(5)]
    bundle.write_logprobs(tmp_path, "fused", "eagle3", rows)
    bundle.write_logprobs(tmp_path, "baseline", "eagle3", rows)
    baseline = base.model_copy(update={"profile": "baseline"})
    judged = apply_gate(run_dir=tmp_path, cells={"fused__eagle3": base, "baseline__eagle3": baseline},
                        thresholds=logprob_gate.thresholds({}))
    assert judged["fused__eagle3"].correctness.status == "PASS"
    assert judged["fused__eagle3"].correctness.exact_match_rate == 1.0
    assert judged["fused__eagle3"].correctness.model_extra["logprobs"]["tokens"] == 250
    assert base.correctness.status == "pending"  # the record given is left as it was
    with pytest.raises(ValueError, match="frozen"):
        judged["fused__eagle3"].correctness.status = "FAIL"  # a verdict is worded otherwise only as a new one
    invalid = base.model_copy(update={"valid": False})
    again = apply_gate(run_dir=tmp_path, cells={"fused__eagle3": invalid, "baseline__eagle3": baseline},
                       thresholds=logprob_gate.thresholds({}))
    assert again["fused__eagle3"].correctness.status == "n/a (invalid run)"  # partial outputs vouch for nothing
    assert again["fused__eagle3"].correctness.model_extra["logprobs"]["tokens"] == 250


@pytest.mark.parametrize(("change", "field"), [
    ({"valid": "yes"}, "valid"),
    ({"spec_params": {"steps": 0, "topk": 1, "draft_tokens": 2}}, "spec_params.steps"),
    ({"by_concurrency": {"1": {"output_throughput_mean": "80"}}}, "by_concurrency.1.output_throughput_mean"),
    ({"correctness": {"status": "PASS", "reasons": "none"}}, "correctness.reasons"),
    ({"per_repeat": {"0": {}}}, "per_repeat"),
])
def test_a_malformed_file_is_refused_naming_the_file_and_the_field(tmp_path, change, field):
    cell = close_cell(measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]}), concurrency=[1, 4], repeats=2)
    path = tmp_path / "fused__eagle3.json"
    path.write_text(json.dumps({**cell.to_json(), **change}))
    with pytest.raises(UserError) as err:
        bundle.read_cell(path)
    assert str(path) in str(err.value) and f"key '{field}" in str(err.value)


def test_what_a_server_reports_that_cannot_be_recorded_is_a_runtime_failure_naming_it():
    draft = measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]})
    draft.local = "not a mapping"  # what a broken control API could answer for the plan's local values
    with pytest.raises(RuntimeFailure, match="fused\\+eagle3: cannot record local"):
        close_cell(draft, concurrency=[1, 4], repeats=2)


def test_a_draft_adopts_an_earlier_measurement_of_the_same_cell():
    earlier = close_cell(measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]}), concurrency=[1, 4], repeats=2)
    draft = new_cell(profile="fused", spec="eagle3", settings=settings(), num_prompts=2)
    draft.adopt(earlier.model_copy(update={"server": None}))
    assert (draft.plan_digest, draft.setup_digest, draft.switch["outcome"]) == ("d1", "s1", "switched")
    assert draft.simulated is True and draft.server is None and draft.per_repeat == []


def test_a_cell_keeps_each_levels_acceptance_when_its_repeats_carried_histograms():
    draft = measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]})
    hists = {1: [1, 3], 4: [3, 1]}
    draft.per_repeat = [r.model_copy(update={"spec_correct_drafts_histogram": hists[r.concurrency]})
                        for r in draft.per_repeat]
    cell = close_cell(draft, concurrency=[1, 4], repeats=2)
    assert {c: a.correct_drafts_histogram for c, a in cell.acceptance.items()} == {"1": [2, 6], "4": [6, 2]}
    assert cell.acceptance["1"].position_rates == [0.75]
    draft.invalid_reason = "interrupted"
    assert close_cell(draft, concurrency=[1, 4], repeats=2).acceptance == {}  # an invalid cell reports no numbers
    plain = close_cell(measured(settings(), {1: [1.0, 1.0], 4: [1.0, 1.0]}), concurrency=[1, 4], repeats=2)
    assert plain.acceptance == {} and "acceptance" not in plain.to_json()


def test_open_loop_repeats_make_rate_levels_with_their_own_acceptance():
    draft = measured(settings(), {1: [1.0, 1.0]})
    open_loop = [r.model_copy(update={"concurrency": None, "request_rate": 2.5, "spec_correct_drafts_histogram": [1, 1]})
                 for r in draft.per_repeat]
    draft.per_repeat = [*draft.per_repeat, *open_loop]
    cell = close_cell(draft, concurrency=[1], repeats=2, rates=[2.5])
    assert cell.valid and cell.rate_levels == [2.5] and set(cell.by_rate) == {"2.5"}
    assert cell.rate_level(2.5).value("output_throughput") == cell.level(1).value("output_throughput")
    assert cell.acceptance == {} and cell.acceptance_by_rate["2.5"].correct_drafts_histogram == [2, 2]
    assert {"rate_levels", "by_rate", "acceptance_by_rate"} <= set(cell.to_json())
    short = close_cell(draft, concurrency=[1], repeats=2, rates=[2.5, 5.0])  # the 5 req/s repeats never ran
    assert not short.valid and short.invalid_reason == "only 4 of 6 repeats ran"
