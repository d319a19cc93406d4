"""Production profile switch on a host whose GPUs one server holds: drain, stop, start, health gate,
and roll back to the last plan that worked when the new one fails.

Every switch is journaled (launcher/runtime/records/journal.py) before the old server is touched, and any
failure after that point, not only a failed health gate, takes the rollback path: the server is
never left stopped without an outcome in the history (one records.Entry per switch).

The drain ends only when /metrics counts no running request or nothing listens; a slow or failing
/metrics is asked again until the deadline (failures.DrainCutShort: the switch is aborted). The
health gate fails as soon as supervisord's process info shows an exit since the start request
(exits.ExitWatch: failures.ServerExited), even one supervisord already restarted. The phases move
through transitions.change_phase."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from launcher import settings, state_layout
from launcher.profiles.plan import Plan
from launcher.profiles.render import write_plan
from launcher.runtime import activation
from launcher.runtime.api.metrics_text import running_requests
from launcher.runtime.core.failures import (
    DrainCutShort,
    GateFailed,
    HealthTimeout,
    ServerExited,
    SupervisorGone,
    describe,
)
from launcher.runtime.core.states import Outcome, Phase
from launcher.runtime.core.transitions import change_phase
from launcher.runtime.process.exits import ExitWatch
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.runtime.records import journal, start_records
from launcher.runtime.records import state as runtime_state
from launcher.runtime.records.history import Entry, Label, Rollback

__all__ = ["GateFailed", "Switcher", "Timeouts", "describe", "label"]

STOP_MARGIN_S = 30  # beyond supervisord's own stop wait, before the group is killed
LOG_GRACE_S = 3.0  # the server logged its line before answering; supervisord may not have written it yet
METRICS_TIMEOUT_S = 5.0  # one /metrics read of the drain; a slower answer is asked again
POLL_S = 0.2  # between two reads of /metrics or /health_generate


@dataclass
class Timeouts:
    """Switch timeouts from the settings registry (the control API checked them at start)."""

    drain_s: float = field(default_factory=lambda: settings.KIT_DRAIN_TIMEOUT_S.get())
    stop_s: float = field(default_factory=lambda: settings.KIT_STOP_WAIT_S.get() + STOP_MARGIN_S)
    health_s: float = field(default_factory=lambda: settings.KIT_HEALTH_TIMEOUT_S.get())
    rollback_s: float = field(default_factory=lambda: settings.KIT_ROLLBACK_TIMEOUT_S.get())


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def settled_activation(follower: start_records.Follower, plan: Plan, pid) -> tuple[list[dict], dict]:
    """activation.assess of the running start once its lines are in: a server logs them before it answers, but
    supervisord may not have written them to the log yet, so an inactive verdict is read again (the log caught
    up) until LOG_GRACE_S has passed. `pid`: an async callable, supervisord's pid of the server now."""
    facts, note = await asyncio.to_thread(activation.load_facts)
    deadline = time.monotonic() + LOG_GRACE_S
    while True:
        running = await pid()
        await asyncio.to_thread(follower.catch_up)
        statuses, decode = activation.assess(plan, follower.record_for(running), facts, note)
        if not activation.inactive(statuses) or time.monotonic() > deadline:
            return statuses, decode
        await asyncio.sleep(0.25)


class Switcher:
    """The switch phases. `phase` is what /status shows while one runs; every phase move goes through
    transitions.change_phase."""

    def __init__(self, state_dir: Path, supervisor: Supervisor, timeouts: Timeouts | None = None,
                 follower: start_records.Follower | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 poll_s: float = POLL_S):
        self.sd = state_dir
        self.sup = supervisor
        self.timeouts = timeouts or Timeouts()
        paths = state_layout.StatePaths(state_dir)
        self.follower = follower or start_records.Follower(paths.server_log, paths.starts)
        self.transport = transport  # tests hand in an httpx.MockTransport; None: the network
        self.poll_s = poll_s
        self.phase: Phase | None = None
        self.active: Plan | None = None  # the plan last rendered and started: what health is probed on
        self.server_changed_at = 0.0  # a health reading older than this describes a server that is gone
        self.watch: ExitWatch | None = None  # exits of the server last started, from supervisord's process info

    def enter(self, phase: Phase | None) -> None:
        self.phase = change_phase(self.phase, phase)

    def client(self, timeout: httpx.Timeout | float) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout, transport=self.transport)

    async def _call(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    async def drain(self, url: str, timeout_s: float) -> None:
        """Wait until SGLang's /metrics reports no running request. Only a refused connection means
        nothing runs there; a timeout, a 5xx (or any answer but 200) or text that is not metrics says
        nothing, and is asked again until the deadline: DrainCutShort then, with the last reading."""
        self.enter(Phase.DRAINING)
        deadline = time.monotonic() + timeout_s
        async with self.client(httpx.Timeout(METRICS_TIMEOUT_S, connect=METRICS_TIMEOUT_S)) as client:
            while True:
                try:
                    r = await client.get(f"{url}/metrics")
                    if r.status_code == 200:
                        running = running_requests(r.text)
                        if running == 0:
                            return
                        last = f"{running:.0f} request(s) running"
                    else:
                        last = f"/metrics answered {r.status_code}"
                except httpx.ConnectError:  # nothing listens: nothing runs
                    return
                except httpx.TimeoutException:
                    last = f"/metrics did not answer within {METRICS_TIMEOUT_S:.0f}s"
                except httpx.HTTPError as exc:
                    last = f"/metrics failed ({type(exc).__name__})"
                except ValueError:
                    last = "/metrics answered text that is not Prometheus metrics"
                if time.monotonic() > deadline:
                    what = ("requests still running" if last.endswith("running")
                            else "running requests unknown")
                    raise DrainCutShort(f"drain timeout: {what} after {timeout_s:.0f}s ({last})", last)
                await asyncio.sleep(self.poll_s)

    async def stop(self) -> None:
        """Stop the program, then wait until its whole process group (TP workers too) is gone."""
        self.enter(Phase.STOPPING)
        self.server_changed_at = time.time()
        info = await self._call(self.sup.info)
        pgid = int(info.get("pid") or 0)
        await self._call(self.sup.stop)
        if pgid <= 0:
            return
        deadline = time.monotonic() + self.timeouts.stop_s
        while group_alive(pgid):
            if time.monotonic() > deadline:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    return
                deadline = time.monotonic() + 10
            await asyncio.sleep(0.05)

    async def start(self, plan: Plan) -> None:
        self.enter(Phase.STARTING)
        self.server_changed_at = time.time()
        self.active = plan
        write_plan(self.sd, plan)
        await self.start_program()

    async def start_program(self) -> None:
        """Start the program as it is rendered (a recovery found it stopped), watched for exits from here."""
        watch = ExitWatch.before_start(await self._call(self.sup.info))
        await self._call(self.sup.start)
        watch.exited(await self._call(self.sup.info))  # the pid it started, read as early as it can be
        self.watch = watch

    async def health_gate(self, url: str, timeout_s: float) -> None:
        """200 from /health_generate (SGLang answers 503 while loading); ServerExited as soon as
        supervisord's process info shows that the server exited since its start (exits.ExitWatch),
        HealthTimeout when time runs out. A server started before this process (a recovery) is
        watched from its first answer."""
        self.enter(Phase.HEALTH)
        deadline = time.monotonic() + timeout_s
        watch = self.watch
        self.watch = None
        async with self.client(httpx.Timeout(30, connect=2)) as client:
            while True:
                info = await self._call(self.sup.info)
                if watch is None:
                    watch = ExitWatch.running(info)
                gone = watch.exited(info)
                if gone:
                    raise ServerExited(f"server exited during start-up ({gone})")
                try:
                    r = await client.get(f"{url}/health_generate")
                    if r.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise HealthTimeout(f"health timeout: {url}/health_generate not 200 after {timeout_s:.0f}s")
                await asyncio.sleep(self.poll_s)

    async def activation_check(self, plan: Plan) -> tuple[list[dict], dict]:
        """The expected backends of the healthy new server and the decode all-reduce's carrier, from what
        its start logged on every rank (activation.py), SGLang's precedence and the host facts."""
        self.enter(Phase.ACTIVATION)

        async def pid() -> int:
            return int((await self._call(self.sup.info)).get("pid") or 0)

        return await settled_activation(self.follower, plan, pid)

    async def death_cause(self, starts_before: int) -> str | None:
        """The log's word on why a server started after `starts_before` start lines died (its cause line
        and exception, e.g. MSCCL++'s 'Failed to initialize MSCCL++ collectives'), waiting briefly for it."""
        deadline = time.monotonic() + LOG_GRACE_S
        while True:
            await self._call(self.follower.catch_up)
            cause = self.follower.cause_since(starts_before)
            if cause or time.monotonic() > deadline:
                return cause
            await asyncio.sleep(0.25)

    async def bring_up(self, plan: Plan, timeout_s: float) -> None:
        await self.start(plan)
        await self.health_gate(plan.server_url, timeout_s)

    async def run(self, current: Plan | None, new: Plan, timeout_s: float | None) -> Entry:
        """Full switch; returns the history entry (outcome switched / degraded / rolled_back / failed / aborted, or
        interrupted when supervisord stopped answering: _cut_short).

        OSError from writing the journal means nothing was changed; it propagates."""
        t0 = time.monotonic()
        j = journal.begin(self.sd, label(current), label(new))
        entry = Entry(id=j.id, **{"from": label(current)}, to=label(new))
        go = _Progress(entry, t0)
        if not await self._drained(current, go):
            return self._finish(entry, j, t0)
        try:
            await self._replace(new, timeout_s, j, go)
            return self._finish(entry, j, t0)
        except Exception as exc:  # the gate, a full disk, a supervisord fault: all take the rollback path
            go.lap()
            if isinstance(exc, SupervisorGone):  # nothing can stop or start the server: no rollback either
                return self._cut_short(entry, j, describe(exc), t0)
            await self._failed(exc, go)
        if current is None:
            entry.outcome = Outcome.FAILED
            return self._finish(entry, j, t0)
        entry.rolled_back(await self.roll_back(current, j))
        if entry.outcome == Outcome.INTERRUPTED:  # supervisord stopped answering during the rollback
            return self._cut_short(entry, j, entry.rollback_error or "supervisord stopped answering", t0)
        return self._finish(entry, j, t0)

    async def _drained(self, current: Plan | None, go: _Progress) -> bool:
        """Drain the old server; False, the entry `aborted`, when it could not be: nothing was stopped, the old
        server keeps serving."""
        try:
            if current is not None:
                await self.drain(current.server_url, self.timeouts.drain_s)
        except Exception as exc:
            go.lap()
            go.entry.outcome, go.entry.error = Outcome.ABORTED, describe(exc)
            if isinstance(exc, DrainCutShort):
                go.entry.drain_cut_short = exc.last
            return False
        go.lap()
        return True

    async def _replace(self, new: Plan, timeout_s: float | None, j: journal.Journal, go: _Progress) -> None:
        """Stop the old server, start `new`, gate its health and its backends, commit it: the entry's outcome
        switched or degraded. Any failure raises, `go.step` naming the step it ended."""
        entry = go.entry
        go.step = "stop"
        journal.advance(self.sd, j, Phase.STOPPING)
        await self.stop()
        go.lap()
        go.step = "start"
        journal.advance(self.sd, j, Phase.STARTING)
        await self._call(self.follower.catch_up)
        go.starts_before = self.follower.starts
        await self.start(new)
        go.lap()
        go.step = "health"
        journal.advance(self.sd, j, Phase.HEALTH)
        await self.health_gate(new.server_url, timeout_s or self.timeouts.health_s)
        go.lap()
        go.step = "activation"
        entry.backends, entry.decode_allreduce = await self.activation_check(new)
        entry.lap("activation", time.monotonic() - go.t)  # a failure below times the step again, from its start
        missing = activation.summary(entry.backends)
        if missing and settings.KIT_ACTIVATION_FAILURE.get() == "rollback":
            raise GateFailed(f"expected backend not active: {missing}")
        runtime_state.commit(self.sd, new)
        entry.outcome = Outcome.DEGRADED if missing else Outcome.SWITCHED
        if missing:
            entry.error = f"expected backend not active, kept ({settings.KIT_ACTIVATION_FAILURE.name}=degraded): {missing}"

    async def _failed(self, exc: Exception, go: _Progress) -> None:
        """The entry of a switch whose step `go.step` failed: why (with the server log's word on a server that
        exited), the step, and the server log's tail."""
        entry = go.entry
        entry.error = describe(exc)
        if isinstance(exc, ServerExited):
            cause = await self.death_cause(go.starts_before)
            if cause:
                entry.error += f"; the server log says: {cause}"
        entry.failed_step = go.step
        entry.log_tail = runtime_state.tail(state_layout.StatePaths(self.sd).server_log, 50)

    async def roll_back(self, plan: Plan, j: journal.Journal | None) -> Rollback:
        """Stop whatever runs and bring `plan` back; the outcome (rolled_back; failed; interrupted when supervisord
        stopped answering) and its time, never an exception."""
        self.enter(Phase.ROLLING_BACK)
        t = time.monotonic()
        try:
            if j is not None:
                try:
                    journal.advance(self.sd, j, Phase.ROLLING_BACK)
                except OSError:
                    pass  # the journal still says a switch is open, which is what recovery needs
            await self.stop()
            await self.bring_up(plan, self.timeouts.rollback_s)
        except SupervisorGone as exc:  # cut short, not failed: nothing could be done without supervisord
            return Rollback(Outcome.INTERRUPTED, time.monotonic() - t, describe(exc))
        except Exception as exc:
            return Rollback(Outcome.FAILED, time.monotonic() - t, describe(exc))
        return Rollback(Outcome.ROLLED_BACK, time.monotonic() - t)

    def _cut_short(self, entry: Entry, j: journal.Journal, why: str, t0: float) -> Entry:
        """supervisord stopped answering (SupervisorGone): the switch cannot go on, nor roll back. Outcome
        `interrupted`, as for a control API killed midway: the journal stays, in the phase reached and with `why`,
        and the next start on this state dir (a new `launcher serve`) resolves it and writes the history entry, with
        its resolution. Nothing is appended now: one entry per switch, the one that says how it ended."""
        phase = j.phase_text()
        before = f" (before that: {entry.error})" if entry.error else ""
        entry.outcome, entry.interrupted_phase = Outcome.INTERRUPTED, phase
        entry.error = (f"the switch was cut short in phase '{phase}': {why}{before}; without supervisord nothing can "
                       "stop or start the server: the next `launcher serve` on this state dir resolves the switch "
                       "and records it in the history")
        entry.lap("total", time.monotonic() - t0)
        self.enter(None)
        try:
            journal.cut_short(self.sd, j, why)
        except OSError as exc:  # the journal as it stands still says a switch was cut short
            entry.history_error = describe(exc)
        return entry

    def _finish(self, entry: Entry, j: journal.Journal, t0: float) -> Entry:
        """History first, then the journal goes: a crash in between leaves a journal, never a lost outcome."""
        entry.lap("total", time.monotonic() - t0)
        self.enter(None)
        try:
            runtime_state.append_history(self.sd, entry.to_json())
        except OSError as exc:
            entry.history_error = describe(exc)
            try:  # keep the journal, marked with the outcome, for the next start to record
                journal.finished(self.sd, j, entry.outcome)
            except OSError:
                pass
            return entry
        try:
            journal.clear(self.sd)
        except OSError:
            pass
        return entry


@dataclass
class _Progress:
    """A switch under way: its history entry, the step it is at and when the last step ended (its laps)."""

    entry: Entry
    t: float  # when the last step ended (the switch's start, at first)
    step: str = "drain"
    starts_before: int = 0  # start lines the server log held before the new server was started

    def lap(self) -> None:
        """The step's time, from the end of the last one; the next step is timed from now."""
        now = time.monotonic()
        self.entry.lap(self.step, now - self.t)
        self.t = now


def label(plan: Plan | None) -> Label | None:
    """A plan as history and the journal name it."""
    if plan is None:
        return None
    # adaptive_tiers: a tuned adaptive config (launcher/profiles/adaptive_tiers.py), named only when the plan has one
    return Label(profile=plan.name, spec=plan.spec, spec_params=plan.spec_params, digest=plan.digest(),
                 adaptive_tiers=plan.adaptive_tiers)
