"""bench/tune/adaptive.py: the per-level winners of the static points, the tiers written from them (one per
--concurrency level, 0 steps where off wins), the profile that promises most, and when no candidate is built."""

from __future__ import annotations

import pytest

from bench.tune import adaptive
from bench.tune.journal import Entry
from bench.tune.ledger import Ledger
from bench.tune.space import Candidate

LEVELS = (1, 4, 16)


def _entry(label: str, by_level: dict[int, float], status: str = "ok", phase: str = "screen") -> Entry:
    reps = [{"concurrency": c, "repeat": r, "output_throughput": v} for c, v in by_level.items() for r in (0, 1)]
    return Entry(label=label, profile=label.split("+")[0], status=status, plan_digest="d", profile_hash="h",  # type: ignore[arg-type]
                 settings_digest="s", phase=phase, reason="server failed" if status == "failed" else "",  # type: ignore[arg-type]
                 spec=Candidate.parse(label).spec, detail={"cell": {"per_repeat": reps}})


def _ledger(*entries: Entry) -> Ledger:
    led = Ledger(thresholds=None)  # type: ignore[arg-type]  # no rows: no gate verdict to take
    led.entries = list(entries)
    return led


def _cands(*labels: str) -> list[Candidate]:
    return [Candidate.parse(label) for label in labels]


STATIC = ("p+off", "p+eagle3(1,1,2)", "p+eagle3(3,1,4)")


def test_each_level_takes_its_fastest_point_and_off_writes_zero_steps():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}),
                  _entry("p+eagle3(3,1,4)", {1: 95, 4: 160, 16: 200}))
    plan = adaptive.build(led, _cands(*STATIC), [16, 1, 4])
    assert [(w.level, w.label, w.steps) for w in plan.winners] == [
        (1, "p+eagle3(3,1,4)", 3), (4, "p+eagle3(1,1,2)", 1), (16, "p+off", 0)]
    assert plan.tiers is not None and plan.tiers.to_json() == {"1": [3], "4": [1], "16": [0]}
    assert plan.candidate == Candidate("p", "eagle3-adaptive", tiers=plan.tiers)
    assert plan.candidate.label == "p+eagle3-adaptive[1:3,4:1,16:0]"
    assert plan.predicted == pytest.approx((95 * 180 * 400) ** (1 / 3))
    assert plan.best_static == pytest.approx(max((50 * 150 * 400) ** (1 / 3), (80 * 180 * 300) ** (1 / 3),
                                                 (95 * 160 * 200) ** (1 / 3)))
    data = plan.to_json()
    assert data["config"] == {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]},
                              "16": {"candidate_steps": [0]}}
    lines = adaptive.summary_lines(data, plan.candidate.label)
    assert "concurrency 16: p+off wins" in lines[2] and "1:3,4:1,16:0" in lines[3] and "won" in lines[4]
    assert "did not win (p+off chosen)" in adaptive.summary_lines(data, "p+off")[-1]


def test_the_profile_whose_winners_promise_most_is_chosen():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}),
                  _entry("q+off", {1: 60, 4: 160, 16: 420}), _entry("q+eagle3(1,1,2)", {1: 90, 4: 200, 16: 310}))
    plan = adaptive.build(led, _cands("p+off", "p+eagle3(1,1,2)", "q+off", "q+eagle3(1,1,2)"), LEVELS)
    assert plan.profile == "q" and plan.tiers.to_json() == {"1": [1], "4": [1], "16": [0]}
    assert set(plan.by_profile) == {"p", "q"}


def test_failed_ngram_wide_and_unscreened_points_fill_no_tier():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}),
                  _entry("p+eagle3(2,1,3)", {1: 999, 4: 999, 16: 999}, status="failed"),  # never chosen
                  _entry("p+ngram", {1: 500, 4: 500, 16: 500}),  # no EAGLE steps to write
                  _entry("p+eagle3(2,2,4)", {1: 500, 4: 500, 16: 500}),  # top-k 2: SGLang adapts top-k 1 only
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 100, 16: 300}),
                  _entry("p+eagle3(3,1,4)", {1: 700, 4: 700, 16: 700}, phase="final"))  # winners come from screening
    cands = _cands("p+off", "p+eagle3(2,1,3)", "p+ngram", "p+eagle3(2,2,4)", "p+eagle3(1,1,2)", "p+eagle3(3,1,4)")
    plan = adaptive.build(led, cands, LEVELS)
    assert plan.tiers.to_json() == {"1": [1], "4": [0], "16": [0]}


@pytest.mark.parametrize("rows, words", [
    ({"p+off": {1: 90, 4: 150, 16: 400}, "p+eagle3(1,1,2)": {1: 80, 4: 100, 16: 300}}, "off wins at every level"),
    ({"p+off": {1: 50, 4: 150, 16: 300}, "p+eagle3(1,1,2)": {1: 80, 4: 180, 16: 310}},
     "p+eagle3(1,1,2) wins at every level"),
    ({"p+off": {1: 50, 4: 150}}, "measured at every concurrency level"),
])
def test_no_candidate_when_nothing_differs_between_levels(rows, words):
    plan = adaptive.build(_ledger(*(_entry(k, v) for k, v in rows.items())), _cands(*rows), LEVELS)
    assert plan.candidate is None and words in plan.reason
    assert words in adaptive.summary_lines(plan.to_json(), None)[-1]


def test_a_candidate_the_server_refuses_is_none():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(1,1,2)", {1: 80, 4: 100, 16: 300}))
    plan = adaptive.build(led, _cands("p+off", "p+eagle3(1,1,2)"), LEVELS)
    assert plan.candidate is not None
    refused = adaptive.AdaptivePlan(**{**plan.__dict__, "refused": "HTTP 400 no"})
    assert refused.candidate is None and "HTTP 400 no" in refused.describe()


def test_the_server_judges_the_candidate_before_it_joins_the_final():
    import asyncio

    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(1,1,2)", {1: 80, 4: 100, 16: 300}))
    plan = adaptive.build(led, _cands("p+off", "p+eagle3(1,1,2)"), LEVELS)

    class Control:
        def __init__(self, code, body):
            self.code, self.body, self.asked = code, body, []

        async def check(self, profile, spec, spec_params, adaptive_tiers):
            self.asked.append((profile, spec, spec_params, adaptive_tiers))
            return self.code, self.body

    ok = Control(200, {"digest": "abc"})
    assert asyncio.run(adaptive.checked(plan, ok)) == (plan, "abc")
    start = {"steps": 1, "topk": 1, "draft_tokens": 2}  # the tiers' start, explicit
    assert ok.asked == [("p", "eagle3-adaptive", start, {"1": [1], "4": [0], "16": [0]})]
    got, digest = asyncio.run(adaptive.checked(plan, Control(400, {"error": "no such mode"})))
    assert digest is None and got.candidate is None and "HTTP 400 no such mode" in got.refused


def test_a_candidate_whose_bundle_cell_is_the_running_plans_is_left_out_naming_the_cell():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(1,1,2)", {1: 80, 4: 100, 16: 300}))
    plan = adaptive.build(led, _cands("p+off", "p+eagle3(1,1,2)"), LEVELS)
    assert plan.candidate is not None and plan.candidate.label == "p+eagle3-adaptive[1:1,4:0,16:0]"
    running = Candidate.parse("p+eagle3-adaptive[1:1,4:1,16:0]")  # an earlier tune's tiers, the same start (1)
    got = adaptive.sharing_a_cell(plan, [*_cands("p+off", "p+eagle3(1,1,2)"), running])
    assert got.candidate is None and "p__eagle3-adaptive__1-1-2" in got.reason and running.label in got.reason
    assert "would share the bundle cell" in adaptive.summary_lines(got.to_json(), None)[-1]
    same = Candidate.parse(plan.candidate.label)  # the running plan is this very candidate: one arm, no clash
    assert adaptive.sharing_a_cell(plan, [same]) == plan
    elsewhere = Candidate.parse("p+eagle3-adaptive[1:3,4:0,16:0]")  # another start (3): another cell
    assert adaptive.sharing_a_cell(plan, [elsewhere]) == plan
