"""bench/client/open_loop.py: each request leaves at its time, never early and never held back by a slow server
(unless a cap is given); the server's running and queued requests are sampled meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from bench.client.arrivals import Arrivals
from bench.client.open_loop import QUEUED, RUNNING, LoadSampler, run_open
from bench.client.request_record import RequestRecord
from bench.client.workload import Prompt


class FakeServer:
    """Requests that finish only when told to; /metrics answers from a list."""

    def __init__(self, metrics=None):
        self.sent: list[tuple[str, float]] = []
        self.release = asyncio.Event()
        self.metrics = list(metrics or [])
        self.in_flight = 0
        self.most_in_flight = 0

    async def request(self, prompt, t_origin):
        loop = asyncio.get_running_loop()
        self.sent.append((prompt.id, loop.time()))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.release.wait()
        self.in_flight -= 1
        return RequestRecord(prompt_id=prompt.id, ok=True)

    async def metrics_counters(self):
        return self.metrics.pop(0) if self.metrics else None


def _prompts(n):
    return [Prompt(id=f"p{i}", task="chat", messages=(("user", f"q{i}"),)) for i in range(n)]


def test_every_request_leaves_on_schedule_while_earlier_ones_still_run():
    async def go():
        server = FakeServer()
        schedule = (0.0, 0.05, 0.1, 0.15)
        task = asyncio.create_task(run_open(server, _prompts(4), Arrivals(20.0), schedule))
        while len(server.sent) < 4:  # none finishes before all four have left: an open loop waits for no reply
            await asyncio.sleep(0.01)
        server.release.set()
        records, duration, _load = await task
        return server, schedule, records, duration

    server, schedule, records, duration = asyncio.run(go())
    start = server.sent[0][1]
    assert [pid for pid, _ in server.sent] == ["p0", "p1", "p2", "p3"]
    assert all(t - start >= due - 1e-3 for (_, t), due in zip(server.sent, schedule, strict=True))  # never early
    assert server.most_in_flight == 4
    assert [r.scheduled_s for r in records] == list(schedule) and [r.prompt_id for r in records] == ["p0", "p1", "p2", "p3"]
    assert duration >= schedule[-1]


def test_max_concurrency_holds_the_rest_in_the_client():
    async def go():
        server = FakeServer()
        task = asyncio.create_task(run_open(server, _prompts(3), Arrivals(100.0, max_concurrency=1), (0.0, 0.0, 0.0)))
        while not server.sent:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        held = len(server.sent)  # the other two are due, but the cap holds them
        server.release.set()
        await task
        return held, server

    held, server = asyncio.run(go())
    assert held == 1 and server.most_in_flight == 1 and len(server.sent) == 3


def test_a_schedule_of_another_length_is_a_bug_not_a_run():
    with pytest.raises(ValueError):
        asyncio.run(run_open(FakeServer(), _prompts(2), Arrivals(1.0), (0.0,)))


def test_the_sampler_keeps_the_most_and_the_mean_of_what_metrics_said():
    async def go():
        server = FakeServer(metrics=[{RUNNING: 2.0, QUEUED: 0.0}, None, {RUNNING: 6.0, QUEUED: 3.0},
                                     {"other": 1.0}])
        sampler = LoadSampler(server, every_s=0)
        sampler.start()
        while server.metrics:
            await asyncio.sleep(0)
        return await sampler.stop()

    load = asyncio.run(go())
    assert (load.samples, load.running_max, load.running_mean) == (2, 6.0, 4.0)
    assert (load.queued_max, load.queued_mean) == (3.0, 1.5)


def test_a_server_without_metrics_reports_no_load():
    async def go():
        sampler = LoadSampler(FakeServer(), every_s=0)
        sampler.start()
        await asyncio.sleep(0.01)
        return await sampler.stop()

    load = asyncio.run(go())
    assert load.samples == 0 and load.running_max is None and load.queued_mean is None
