"""bench/tune/outside.py: which switches in /status history were made by someone else while a cell ran."""

from __future__ import annotations

import asyncio

from bench.tune import outside
from launcher.errors import RuntimeFailure
from launcher.runtime.api.bodies import ServerStatus


class FakeControl:
    def __init__(self, *histories):
        self.histories = list(histories)

    async def wait_idle(self, timeout_s):
        return await self.status()

    async def status(self):
        h = self.histories.pop(0)
        if isinstance(h, Exception):
            raise h
        return ServerStatus.model_validate({"history": h})  # as the control client parses /status


def entry(i, outcome="switched", profile="p"):
    return {"id": i, "outcome": outcome, "to": {"profile": profile, "spec": "off"}}


def test_only_new_switches_by_others_that_touched_the_server_count():
    before = [entry("a"), {"outcome": "started"}]
    after = [*before, entry("mine"), entry("b", profile="custom-ar"), entry("c", outcome="aborted"), "junk",
             {"id": 5}]
    control = FakeControl(before, after)
    known = asyncio.run(outside.switch_ids(control))
    assert known == {"a"}
    moved = asyncio.run(outside.since(control, known, "mine", 60))
    assert [e.id for e in moved] == ["b"]
    assert outside.describe(moved) == "switch b to custom-ar+off: switched"


def test_nothing_is_blamed_when_the_history_cannot_be_read():
    control = FakeControl(RuntimeFailure("down"))
    assert asyncio.run(outside.switch_ids(control)) is None
    assert asyncio.run(outside.since(FakeControl([entry("x")]), None, None, 60)) == []
    assert asyncio.run(outside.since(FakeControl(RuntimeFailure("down")), {"a"}, None, 60)) == []
    assert asyncio.run(outside.switch_ids(None)) is None
