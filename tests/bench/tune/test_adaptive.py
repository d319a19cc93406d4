"""bench/tune/adaptive.py: the per-level EAGLE steps, the tiers written from them (one per tier SGLang routes the
--concurrency levels to), never 0 from the `off` cell, the profile that promises most, the server's judgement, and
when no candidate is built."""

from __future__ import annotations

import pytest

from bench.tune import adaptive
from bench.tune.journal import Entry
from bench.tune.ledger import Ledger
from bench.tune.space import Candidate
from launcher.profiles import tier_routing as tr
from launcher.profiles.plan import Plan
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api.bodies import CheckAnswer

LEVELS = (1, 4, 16)


def _entry(label: str, by_level: dict[int, float], status: str = "ok", phase: str = "screen") -> Entry:
    reps = [{"concurrency": c, "repeat": r, "output_throughput": v} for c, v in by_level.items() for r in (0, 1)]
    return Entry(label=label, profile=label.split("+")[0], status=status, plan_digest="d", profile_hash="h",  # type: ignore[arg-type]
                 settings_digest="s", phase=phase, reason="server failed" if status == "failed" else "",  # type: ignore[arg-type]
                 spec=Candidate.parse(label).spec, detail={"cell": {"profile": "p", "spec": "off", "per_repeat": reps}})


def _ledger(*entries: Entry) -> Ledger:
    led = Ledger(thresholds=None)  # type: ignore[arg-type]  # no rows: no gate verdict to take
    led.entries = list(entries)
    return led


def _cands(*labels: str) -> list[Candidate]:
    return [Candidate.parse(label) for label in labels]


STATIC = ("p+off", "p+eagle3(1,1,2)", "p+eagle3(3,1,4)")


def test_each_level_takes_its_fastest_eagle_point_and_off_never_writes_zero_steps():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}),
                  _entry("p+eagle3(3,1,4)", {1: 95, 4: 160, 16: 200}))
    plan = adaptive.build(led, _cands(*STATIC), [16, 1, 4])
    assert [(w.level, w.label, w.steps) for w in plan.winners] == [
        (1, "p+eagle3(3,1,4)", 3), (4, "p+eagle3(1,1,2)", 1), (16, "p+eagle3(1,1,2)", 1)]
    # off was faster at 16, but its cell had no draft forward and no request cap: the level keeps EAGLE's best
    assert plan.off_faster == [16] and plan.winners[2].off_tokps == 400
    assert plan.tiers is not None and plan.tiers.to_json() == {"1": [3], "4": [1], "16": [1]}
    assert 0 not in plan.tiers.union()
    assert plan.candidate == Candidate("p", "eagle3-adaptive", tiers=plan.tiers)
    assert plan.candidate.label == "p+eagle3-adaptive[1:3,4:1,16:1]"
    assert plan.predicted == pytest.approx((95 * 180 * 300) ** (1 / 3))  # what the tiers run, never off's 400
    assert plan.best_static == pytest.approx(max((80 * 180 * 300) ** (1 / 3), (95 * 160 * 200) ** (1 / 3)))
    data = plan.to_json()
    assert data["config"] == {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]},
                              "16": {"candidate_steps": [1]}}
    assert data["off_faster"] == [16] and "cannot be turned off inside one EAGLE server" in data["notes"][0]
    assert data["per_level_winners"][2] == {"concurrency": 16, "label": "p+eagle3(1,1,2)", "steps": 1,
                                            "tokps": 300, "tier": 16, "off_tokps": 400}
    lines = adaptive.summary_lines(data, plan.candidate.label)
    assert "concurrency 16: p+eagle3(1,1,2)" in lines[2] and "off was faster (400.0 tok/s) but fills no tier" in lines[2]
    assert "speculation cannot be turned off inside one EAGLE server" in lines[3]
    assert "1:3,4:1,16:1" in lines[4] and "won" in lines[5]
    assert "did not win (p+off chosen)" in adaptive.summary_lines(data, "p+off")[-1]
    assert "cannot be turned off" in plan.describe()


def test_a_zero_step_tier_comes_only_from_a_measured_zero_step_eagle_pass():
    """The running adaptive plan measured at a level whose tier holds one step [0] is a 0-step EAGLE measurement:
    that, and never the off cell, may write 0."""
    running = "p+eagle3-adaptive[1:3,16:0]"
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 500}),
                  _entry("p+eagle3(3,1,4)", {1: 95, 4: 160, 16: 200}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}),
                  _entry(running, {1: 94, 4: 150, 16: 420}))
    plan = adaptive.build(led, _cands(*STATIC, running), LEVELS)
    assert plan.tiers.to_json() == {"1": [3], "4": [1], "16": [0]}
    w16 = plan.winners[2]
    assert (w16.label, w16.steps, w16.tokps, w16.off_tokps) == (running, 0, 420, 500)
    # at 4 the running plan ran its tier 1 (3 steps): a measurement of 3 steps there, slower than (1,1,2)
    assert adaptive.tier_steps(Candidate.parse(running), 4) == 3
    assert adaptive.tier_steps(Candidate.parse("p+eagle3-adaptive[1:1/3]"), 1) is None  # a moving tier: not fixed
    assert adaptive.tier_steps(Candidate.parse("p+off"), 1) is None


def test_levels_routed_to_one_tier_share_the_steps_with_the_best_geometric_mean_over_them():
    """SGLang pads a batch to the --cuda-graph-bs-decode size at or above it before it picks a tier: levels 3 and 4
    both run the tier at 4, so one tier serves both, keyed where SGLang routes them."""
    routing = tr.Routing(capture=(1, 2, 4, 8, 16), running=48)
    led = _ledger(_entry("p+eagle3(3,1,4)", {1: 95, 3: 150, 4: 160, 12: 200}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 3: 140, 4: 180, 12: 300}))
    plan = adaptive.build(led, _cands("p+eagle3(3,1,4)", "p+eagle3(1,1,2)"), [1, 3, 4, 12], routing)
    assert plan.tiers.to_json() == {"1": [3], "4": [1], "16": [1]}  # 12 pads to 16
    by = {w.level: w for w in plan.winners}
    assert (by[3].label, by[3].key, by[3].shared) == ("p+eagle3(1,1,2)", 4, (4,))  # 140*180 > 150*160
    assert by[12].key == 16
    for w in plan.winners:  # every level runs the steps recorded for it, as SGLang routes its batches
        assert routing.steps_for(plan.tiers, w.level) == (w.steps,)
    assert any("route to one tier (4)" in n for n in plan.to_json()["notes"])
    lines = adaptive.summary_lines(plan.to_json(), None)
    assert "concurrency 12: p+eagle3(1,1,2) (300.0 tok/s) -> steps 1 (tier 16)" in lines[3]


def test_the_profile_whose_tiers_promise_most_is_chosen():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}),
                  _entry("p+eagle3(3,1,4)", {1: 95, 4: 150, 16: 200}),
                  _entry("q+off", {1: 60, 4: 160, 16: 420}), _entry("q+eagle3(1,1,2)", {1: 90, 4: 200, 16: 310}),
                  _entry("q+eagle3(3,1,4)", {1: 99, 4: 150, 16: 200}))
    plan = adaptive.build(led, _cands("p+off", "p+eagle3(1,1,2)", "p+eagle3(3,1,4)", "q+off", "q+eagle3(1,1,2)",
                                      "q+eagle3(3,1,4)"), LEVELS)
    assert plan.profile == "q" and plan.tiers.to_json() == {"1": [3], "4": [1], "16": [1]}
    assert set(plan.by_profile) == {"p", "q"}


def test_failed_ngram_wide_and_unscreened_points_fill_no_tier():
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}),
                  _entry("p+eagle3(2,1,3)", {1: 999, 4: 999, 16: 999}, status="failed"),  # never chosen
                  _entry("p+ngram", {1: 500, 4: 500, 16: 500}),  # no EAGLE steps to write
                  _entry("p+eagle3(2,2,4)", {1: 500, 4: 500, 16: 500}),  # top-k 2: SGLang adapts top-k 1 only
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 100, 16: 300}),
                  _entry("p+eagle3(4,1,5)", {1: 90, 4: 90, 16: 90}),
                  _entry("p+eagle3(3,1,4)", {1: 700, 4: 700, 16: 700}, phase="final"))  # steps come from screening
    cands = _cands("p+off", "p+eagle3(2,1,3)", "p+ngram", "p+eagle3(2,2,4)", "p+eagle3(1,1,2)", "p+eagle3(4,1,5)",
                   "p+eagle3(3,1,4)")
    plan = adaptive.build(led, cands, LEVELS)
    assert plan.tiers.to_json() == {"1": [4], "4": [1], "16": [1]}


@pytest.mark.parametrize("rows, words", [
    ({"p+off": {1: 90, 4: 150, 16: 400}, "p+eagle3(1,1,2)": {1: 80, 4: 100, 16: 300},
      "p+eagle3(3,1,4)": {1: 70, 4: 90, 16: 200}}, "off is faster than every EAGLE measurement at every level"),
    ({"p+off": {1: 50, 4: 150, 16: 300}, "p+eagle3(1,1,2)": {1: 80, 4: 180, 16: 310}},
     "p+eagle3(1,1,2) serves every tier"),
    ({"p+off": {1: 50, 4: 150, 16: 400}, "p+eagle3(1,1,2)": {1: 80, 4: 100, 16: 300}},  # off faster above 1: still
     "p+eagle3(1,1,2) serves every tier"),  # no 0-step tier from it, so one point everywhere
    ({"p+off": {1: 50, 4: 150}}, "measured at every concurrency level"),
])
def test_no_candidate_when_nothing_differs_between_tiers(rows, words):
    plan = adaptive.build(_ledger(*(_entry(k, v) for k, v in rows.items())), _cands(*rows), LEVELS)
    assert plan.candidate is None and words in plan.reason
    assert words in adaptive.summary_lines(plan.to_json(), None)[-1]
    assert plan.to_json()["tiers"] is None and plan.to_json()["config"] is None


def _two_steps() -> adaptive.AdaptivePlan:
    led = _ledger(_entry("p+off", {1: 50, 4: 150, 16: 400}), _entry("p+eagle3(3,1,4)", {1: 95, 4: 160, 16: 200}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 4: 180, 16: 300}))
    return adaptive.build(led, _cands(*STATIC), LEVELS)


def test_a_candidate_the_server_refuses_is_none_and_its_tiers_are_never_written():
    plan = _two_steps()
    assert plan.candidate is not None
    refused = adaptive.AdaptivePlan(**{**plan.__dict__, "refused": "HTTP 400 no"})
    assert refused.candidate is None and "HTTP 400 no" in refused.describe()
    data = refused.to_json()
    assert data["tiers"] is None and data["config"] is None and data["refused_tiers"] == plan.tiers.to_json()


class Control:
    """POST /check as the control API answers it: the profile's own eagle3-adaptive plan (its flags), then the
    candidate, refused with `code`/`error` when given."""

    def __init__(self, flags: list[str] | None = None, code: int = 200, error: str = ""):
        self.flags, self.code, self.error, self.asked = flags or [], code, error, []

    async def check(self, profile, spec, spec_params, adaptive_tiers):
        self.asked.append((profile, spec, spec_params, adaptive_tiers))
        if adaptive_tiers is None:  # the parsed answer's plan: only the flags are read
            return CheckAnswer(code=200, plan=Plan.model_construct(flags=self.flags), digest="own")
        return CheckAnswer.of(*((self.code, {"error": self.error}) if self.code != 200 else (200, {"digest": "abc"})))


def test_the_server_judges_the_candidate_keyed_for_the_plans_own_routing():
    import asyncio

    plan = _two_steps()
    ok = Control(["--speculative-algorithm", "EAGLE3", "--speculative-adaptive"])
    got, digest = asyncio.run(adaptive.checked(plan, ok))
    assert digest == "abc" and got.tiers == plan.tiers and got.routing == tr.Routing(None, 48)
    start = SpecParams(steps=3, topk=1, draft_tokens=4)  # the tiers' start, explicit
    assert ok.asked == [("p", "eagle3-adaptive", None, None), ("p", "eagle3-adaptive", start, {"1": [3], "4": [1],
                                                                                             "16": [1]})]
    # a plan with an explicit capture list: 16 concurrent requests are a batch of 16 padded to 32; under the cap
    padded = Control(["--speculative-algorithm", "EAGLE3", "--cuda-graph-bs-decode", "1", "2", "8", "32",
                      "--max-running-requests", "64"])
    got, _ = asyncio.run(adaptive.checked(plan, padded))
    assert got.tiers.to_json() == {"1": [3], "8": [1], "32": [1]} and padded.asked[-1][3] == got.tiers.to_json()
    assert [w.key for w in got.winners] == [1, 8, 32] and got.to_json()["routing"] == {"capture": [1, 2, 8, 32],
                                                                                      "running": 64}
    got, digest = asyncio.run(adaptive.checked(plan, Control(code=400, error="tier 16 overflows the workspace")))
    assert digest is None and got.candidate is None and "HTTP 400 tier 16 overflows the workspace" in got.refused
    assert got.to_json()["config"] is None


def test_levels_above_the_request_cap_route_to_the_cap():
    """EAGLE caps the running requests at 48: 64 concurrent requests run batches of 48, the tier that serves 48."""
    plan = _two_steps()
    led = _ledger(_entry("p+eagle3(3,1,4)", {1: 95, 16: 160, 64: 170}),
                  _entry("p+eagle3(1,1,2)", {1: 80, 16: 180, 64: 190}))
    plan = adaptive.build(led, _cands("p+eagle3(3,1,4)", "p+eagle3(1,1,2)"), [1, 16, 64], tr.Routing(None, 48))
    assert plan.tiers.to_json() == {"1": [3], "16": [1], "48": [1]}
    wide = tr.Routing((1, 2, 4, 8, 16, 32, 64), 48)  # a capture list wider than the pool: 48 pads to 64
    plan = plan.routed(wide)
    assert plan.tiers.to_json() == {"1": [3], "16": [1], "33": [1]}  # keyed within the cap, routed as 64
    assert wide.steps_for(plan.tiers, 64) == (1,) and wide.steps_for(plan.tiers, 16) == (1,)


def test_a_candidate_whose_bundle_cell_is_the_running_plans_is_left_out_naming_the_cell():
    plan = _two_steps()
    assert plan.candidate is not None and plan.candidate.label == "p+eagle3-adaptive[1:3,4:1,16:1]"
    running = Candidate.parse("p+eagle3-adaptive[1:3,4:3,16:1]")  # an earlier tune's tiers, the same start (3)
    got = adaptive.sharing_a_cell(plan, [*_cands(*STATIC), running])
    assert got.candidate is None and "p__eagle3-adaptive__3-1-4" in got.reason and running.label in got.reason
    assert "would share the bundle cell" in adaptive.summary_lines(got.to_json(), None)[-1]
    same = Candidate.parse(plan.candidate.label)  # the running plan is this very candidate: one arm, no clash
    assert adaptive.sharing_a_cell(plan, [same]) == plan
    elsewhere = Candidate.parse("p+eagle3-adaptive[1:2,4:1,16:1]")  # another start (2): another cell
    assert adaptive.sharing_a_cell(plan, [elsewhere]) == plan
