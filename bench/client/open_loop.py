"""Send a repeat's prompts open loop: each at its scheduled time (bench/client/arrivals.py), whatever the server
is doing, and sample the server's running and waiting requests while they run.

A request leaves at its time even when earlier ones have not finished; with `max_concurrency` it then waits in
the client for a free slot (its TTFT counts from when it is sent, as vLLM's `--max-concurrency` does). Each
record keeps when it was due (`scheduled_s`), so a client that fell behind its own schedule shows as the gap
between `scheduled_s` and `start_s`, and the repeat's offered rate is what was scheduled, its achieved rate what
completed over the time from the first send to the last reply.

While the repeat runs, `/metrics` is read every `SAMPLE_S` seconds for `sglang:num_running_reqs` and
`sglang:num_queue_reqs` (SGLang serves them with `--enable-metrics`; docs/evidence.md): the running count shows
where the server's cap on running requests (48 under EAGLE unless the plan sets another) held the load, the
queue count how many waited.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bench.client.arrivals import Arrivals
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import Prompt

SAMPLE_S = 0.25
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"


@dataclass(frozen=True)
class ServerLoad:
    """What the server reported of its load while a repeat ran: the most and the mean of its running and queued
    requests over `samples` reads of /metrics (None when /metrics never answered with them)."""

    samples: int = 0
    running_max: float | None = None
    running_mean: float | None = None
    queued_max: float | None = None
    queued_mean: float | None = None


class LoadSampler:
    """Reads the server's running and queued requests from /metrics until stopped."""

    def __init__(self, server: ServerClient, every_s: float = SAMPLE_S):
        self.server, self.every_s = server, every_s
        self.running: list[float] = []
        self.queued: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            counters = await self.server.metrics_counters()
            if counters is not None and RUNNING in counters:
                self.running.append(counters[RUNNING])
                if QUEUED in counters:
                    self.queued.append(counters[QUEUED])
            await asyncio.sleep(self.every_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> ServerLoad:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        run, queue = self.running, self.queued
        return ServerLoad(samples=len(run), running_max=max(run, default=None),
                          running_mean=sum(run) / len(run) if run else None,
                          queued_max=max(queue, default=None), queued_mean=sum(queue) / len(queue) if queue else None)


async def run_open(
    server: ServerClient,
    prompts: Sequence[Prompt],
    arrivals: Arrivals,
    schedule: Sequence[float],
    on_done: Callable[[RequestRecord], Awaitable[None] | None] | None = None,
) -> tuple[list[RequestRecord], float, ServerLoad]:
    """Send prompt i at `schedule[i]` seconds after the start (at most `arrivals.max_concurrency` in flight);
    returns the records (prompt order, each with its `scheduled_s`), the time from the start to the last reply,
    and the server's load meanwhile."""
    if len(schedule) != len(prompts):
        raise ValueError(f"{len(schedule)} send times for {len(prompts)} prompts")
    cap = arrivals.max_concurrency
    sem = asyncio.Semaphore(cap) if cap is not None else None
    loop = asyncio.get_running_loop()
    t0, start = time.perf_counter(), loop.time()
    sampler = LoadSampler(server)
    sampler.start()

    async def one(p: Prompt, due: float) -> RequestRecord:
        await asyncio.sleep(max(0.0, start + due - loop.time()))
        if sem is None:
            rec = await server.request(p, t0)
        else:
            async with sem:
                rec = await server.request(p, t0)
        rec = rec.model_copy(update={"scheduled_s": due})
        if on_done is not None:
            res = on_done(rec)
            if asyncio.iscoroutine(res):
                await res
        return rec

    try:
        records = await asyncio.gather(*(one(p, due) for p, due in zip(prompts, schedule, strict=True)))
    finally:
        load = await sampler.stop()
    return list(records), time.perf_counter() - t0, load
