"""bench.tune.planning: the server's POST /check of every candidate before the first switch, with a control API
that answers as the real one does (a plan's flags, a digest, or a refusal)."""

from __future__ import annotations

import asyncio

import pytest
from helpers_profiles import ENV

from bench.tune.objective import Objective
from bench.tune.planning import TuneSpace, server_check
from bench.tune.settings import TuneSettings
from bench.tune.space import Candidate
from launcher.errors import UserError
from launcher.profiles.plan import build_plan
from launcher.runtime.api.bodies import CheckAnswer


class Control:
    """POST /check as the control API answers it: the plan the switch would run (build_plan), or 400."""

    def __init__(self):
        self.checked: list[tuple[str, str]] = []

    async def check(self, profile, spec, spec_params=None, adaptive_tiers=None):
        self.checked.append((profile, spec))
        plan = build_plan(profile, spec, environ=ENV, spec_params=spec_params)
        return CheckAnswer.of(200, {"digest": plan.digest(), "plan": plan.to_json()})


def _settings(concurrency: list[int]) -> TuneSettings:
    return TuneSettings(url="http://s", control="http://c", out="/tmp/x", profiles=("baseline",),
                        specs=("eagle3", "off"), points=(), budget_s=60, concurrency=concurrency,
                        objective=Objective())


def _space() -> TuneSpace:
    return TuneSpace(candidates=[Candidate("baseline", "off"), Candidate("baseline", "eagle3")])


def test_a_level_above_eagles_cap_is_exit_2_before_any_switch():
    control = Control()
    with pytest.raises(UserError) as err:
        asyncio.run(server_check(_settings([1, 64]), control, _space()))
    text = str(err.value)
    assert "baseline+eagle3: --concurrency 64 is above the server's max_running_requests 48" in text
    assert "as its plan's flags resolve it" in text and "--max-running-requests 64" in text
    assert "(nothing was switched)" in text


def test_levels_within_the_cap_pass_and_off_has_no_cap():
    space = _space()
    asyncio.run(server_check(_settings([1, 48]), Control(), space))
    assert [c.label for c in space.candidates] == ["baseline+off", "baseline+eagle3"]
    space = TuneSpace(candidates=[Candidate("baseline", "off")])
    settings = _settings([1, 64])
    settings.specs = ("off",)
    asyncio.run(server_check(settings, Control(), space))  # off: SGLang sizes the pool from memory, no cap
    assert [c.label for c in space.candidates] == ["baseline+off"]
