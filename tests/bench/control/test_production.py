"""bench/control/production.py: a plan's label and the command that restores it by hand, /status read as "runs this
plan", and `put_on` against a fake control client whose answers are the input (the stack tests in
test_bench_run_production.py and test_bench_tune_runner_wrong.py run it against the real control API)."""

from __future__ import annotations

import asyncio
import shlex

import pytest

from bench.control import production
from bench.control.production import PlanRef
from bench.tune.space import Candidate
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api.bodies import ServerStatus, SwitchAnswer

# the plans as /plan's JSON names them, and as the record read from it
EAGLE_JSON = {"name": "fused", "spec": "eagle3", "spec_params": {"steps": 1, "topk": 1, "draft_tokens": 2}, "digest": "d1"}
ADAPTIVE_JSON = {"name": "fused", "spec": "eagle3-adaptive", "spec_params": {"steps": 3, "topk": 1, "draft_tokens": 4},
                 "adaptive_tiers": {"1": [3], "4": [1], "16": [0]}, "digest": "d2"}
OFF_JSON = {"name": "baseline", "spec": "off", "spec_params": None, "digest": "d3"}
EAGLE, ADAPTIVE, OFF = (PlanRef.from_json(p) for p in (EAGLE_JSON, ADAPTIVE_JSON, OFF_JSON))


@pytest.mark.parametrize("plan", [EAGLE, ADAPTIVE, OFF])
def test_a_plan_is_labelled_as_the_tune_labels_its_candidates(plan):
    assert production.label_of(plan) == Candidate.of_plan(plan).label


def test_the_restore_command_is_launcher_switch_or_a_post_with_the_tiers():
    words = shlex.split(production.switch_command(EAGLE, "http://h:9000"))
    assert words == ["launcher", "switch", "fused", "--spec", "eagle3", "--url", "http://h:9000",
                     "--spec-params", "1,1,2"]
    assert shlex.split(production.switch_command(OFF, "http://h:9000"))[2:5] == ["baseline", "--spec", "off"]
    curl = production.switch_command(ADAPTIVE, "http://h:9000/")
    assert curl.startswith("curl -sS -X POST http://h:9000/switch ")
    assert '"adaptive_tiers":{"1":[3],"4":[1],"16":[0]}' in curl and '"steps":3' in curl


def test_runs_needs_the_digest_only_when_the_plan_has_one():
    st = {"profile": "baseline", "spec": "off", "digest": "d3", "state": "serving"}
    assert production.runs(_status(st), OFF)
    assert not production.runs(_status({**st, "digest": "other"}), OFF)
    assert production.runs(_status({**st, "digest": "other"}), PlanRef.from_json({**OFF_JSON, "digest": None}))
    assert not production.runs(_status({**st, "state": "switching"}), OFF)
    assert not production.runs(_status({**st, "spec": "eagle3"}), OFF)


def _status(body: dict) -> ServerStatus:
    """/status as the control client parses it."""
    return ServerStatus.model_validate(body)


class FakeClient:
    def __init__(self, statuses, answers):
        self.statuses, self.answers, self.switches = list(statuses), list(answers), []

    async def wait_idle(self, timeout_s):
        return _status(self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])

    async def switch_when_idle(self, profile, spec, timeout_s, spec_params=None, adaptive_tiers=None):
        self.switches.append((profile, spec, spec_params, adaptive_tiers))
        return SwitchAnswer.of(*self.answers.pop(0))


SERVING_OFF = {"profile": "baseline", "spec": "off", "digest": "d3", "state": "serving"}
ELSEWHERE = {"profile": "fast", "spec": "off", "digest": "dx", "state": "serving"}


def test_put_on_switches_only_when_needed_and_checks_the_result():
    already = FakeClient([SERVING_OFF], [])
    assert asyncio.run(production.put_on(already, OFF, 5)) is None and already.switches == []

    moved = FakeClient([ELSEWHERE, SERVING_OFF], [(200, {"outcome": "switched", "to": {"profile": "baseline", "spec": "off", "digest": "d3"}})])
    assert asyncio.run(production.put_on(moved, OFF, 5)) is None
    assert moved.switches == [("baseline", "off", None, None)]

    adaptive = FakeClient([ELSEWHERE, {**SERVING_OFF, "profile": "fused", "spec": "eagle3-adaptive", "digest": "d2"}],
                          [(200, {"outcome": "switched"})])
    assert asyncio.run(production.put_on(adaptive, ADAPTIVE, 5)) is None
    assert adaptive.switches == [("fused", "eagle3-adaptive", SpecParams(steps=3, topk=1, draft_tokens=4),
                                  ADAPTIVE_JSON["adaptive_tiers"])]


def test_put_on_says_why_when_the_switch_fails_or_another_plan_keeps_running():
    failed = FakeClient([ELSEWHERE], [(200, {"outcome": "rolled_back", "error": "boom"})])
    assert asyncio.run(production.put_on(failed, OFF, 5)) == "HTTP 200 rolled_back: boom"

    edited = FakeClient([ELSEWHERE, {**SERVING_OFF, "digest": "d-new"}],
                        [(200, {"outcome": "switched", "to": {"profile": "baseline", "spec": "off", "digest": "d-new"}})] * production.ATTEMPTS)
    why = asyncio.run(production.put_on(edited, OFF, 5))
    assert why is not None and "it runs digest d-new, not d3" in why
    assert len(edited.switches) == production.ATTEMPTS  # a switch still running from before is waited out, retried


def test_a_plan_is_read_from_its_json_and_written_back_the_same():
    assert ADAPTIVE.to_json() == ADAPTIVE_JSON and ADAPTIVE.spec_params == SpecParams(steps=3, topk=1, draft_tokens=4)
    assert production.plan_ref("fused", "eagle3", SpecParams(steps=1, topk=1, draft_tokens=2), digest="d1") == EAGLE
    assert EAGLE.to_json() == {**EAGLE_JSON, "adaptive_tiers": None}
    for params in ([1, 1, 2], {"steps": 0, "topk": 1, "draft_tokens": 2}, {"steps": "1", "topk": 1, "draft_tokens": 2}):
        odd = PlanRef.from_json({"name": "fused", "spec": "eagle3", "spec_params": params, "digest": 7})
        assert (odd.spec_params, odd.adaptive_tiers, odd.digest) == (None, None, None)
    assert production.label_of(odd) == "fused+eagle3"
