"""The server's lifecycle, as the control API keeps it: health, unplanned restarts, crash loops,
the switch's bookkeeping, and the resolution of a switch that a restart cut short.

The HTTP layer (control_api.py) only asks it for `status()` and `switch()`; the monitor runs beside.
It observes (supervisord's process info, /health, the journal, the clock) and carries out; what the
next state is, and what to do, is decided in transitions.py, whose table every move goes through:
- starting/failed -> serving: /health answers 200 (the first healthy start of a plan is committed);
- serving/degraded/rolled_back -> down: supervisord's program is neither RUNNING nor STARTING, or /health
  is refused (a slow /health is not "down": SGLang's runs a one-token generation, at least 1 s, so each
  probe waits KIT_HEALTH_PROBE_TIMEOUT_S, past SGLang's own 20 s limit);
- down -> the state it left: /health answers 200 again;
- any -> failed: supervisord gave up (FATAL); it is started again after a doubling backoff;
- starting -> failed: the first start ended (EXITED, STOPPED, ...);
- any -> switching -> the state the switch's outcome names; starting -> recovering -> serving/rolled_back/failed.
The monitor moves nothing while a switch or a recovery holds the lock. States and outcomes are named in states.py;
the other decisions (restart counting, the crash loop's error, a recovery's fallback) are decisions.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from launcher import settings, state_layout
from launcher.errors import RuntimeFailure
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.plan import Plan, reach_url
from launcher.profiles.spec_params import SpecParams
from launcher.runtime import activation, log, recovery, start_lines
from launcher.runtime.admission import validated_plan
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.core import decisions, transitions
from launcher.runtime.core.failures import describe
from launcher.runtime.core.states import ANSWERING, Outcome, Phase, State
from launcher.runtime.core.transitions import HEALTH_DOWN, HEALTH_OK, Act, Move, Reading, Retry
from launcher.runtime.history_reads import HistoryReads
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.runtime.records import journal, start_records
from launcher.runtime.records import state as runtime_state
from launcher.runtime.records.history import Entry
from launcher.runtime.records.switch_counts import SwitchCounts
from launcher.runtime.status_body import server_status
from launcher.runtime.switch import Switcher, label, settled_activation


class Busy(Exception):
    """Another switch holds the lock."""


class Lifecycle:
    """One server's state, from supervisord, /health and the switches made through the control API."""

    def __init__(self, state_dir: Path, supervisor: Supervisor | None = None, switcher: Switcher | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, clock: Callable[[], float] = time.time):
        """`supervisor`, `switcher`, `transport` (for /health) and `clock` stand in for the real ones in tests."""
        self.sd = state_dir
        self.paths = state_layout.StatePaths(state_dir)
        self.sup = supervisor or Supervisor(self.paths.socket)
        self.transport = transport
        self.clock = clock
        # What each server start logged, kept in the state dir as it appears (start_records.Follower).
        self.follower = start_records.Follower(self.paths.server_log, self.paths.starts)
        self.switcher = switcher or Switcher(state_dir, self.sup, follower=self.follower, transport=transport)
        self.lock = asyncio.Lock()
        committed = runtime_state.committed(state_dir)
        self.last_good: Plan | None = committed.plan if committed else None
        self.current: Plan | None = runtime_state.rendered_plan(state_dir) or self.last_good
        # With no readable plan at all, health is still probed where the settings put the server.
        self.fallback_url = reach_url({"host": settings.KIT_SERVER_HOST.get(), "port": settings.KIT_SERVER_PORT.get()})
        self.state = State.STARTING
        self.resume_state = State.SERVING  # what `down` goes back to when the server answers again
        self.since = time.time()
        self.events: tuple[Move, ...] = ()  # the last moves of the state, newest last (/status `events`)
        self.health = "unknown"
        self.health_at: float | None = None
        self.restarts = 0
        self.unhealthy_restarts = 0  # restarts since /health last answered ok: a crash loop supervisord cannot see
        self.death_cause: str | None = None  # the server log's word on why the last restarted start died
        self.pid = 0
        self.last_error: str | None = None
        self.retry = Retry(backoff_s=settings.KIT_RETRY_BACKOFF_S.get())  # the automatic restart after FATAL
        self.recovery: asyncio.Task | None = None
        self.backends: list[dict] = []  # activation of the running plan's expected backends
        self.decode_allreduce: dict | None = None  # {"backend", "why"}: what carries the decode all-reduce
        self.backends_of: tuple | None = None  # (pid, digest, follower version) they were read for
        self.settled_for: tuple | None = None  # (pid, digest) of the start whose lines had their grace
        self.reads = HistoryReads(state_dir)  # history.jsonl's tail and the switch counts (/status, /metrics)

    @property
    def retries(self) -> int:
        """Automatic restarts made after supervisord gave up (/status `retry.attempts`)."""
        return self.retry.attempts

    # ----- what /status and /metrics share ---------------------------------------------------------
    def health_age_s(self) -> float | None:
        """Seconds since the last /health probe; None before the first."""
        return None if self.health_at is None else round(time.time() - self.health_at, 3)

    def history_view(self) -> tuple[list[Entry], int]:
        """history.jsonl's last 20 entries and its skipped lines, read again only when the file changed."""
        return self.reads.view()

    def switch_counts_now(self) -> SwitchCounts | None:
        """The switch counts (/status `switches`, /metrics kit_switch_*); None while the history cannot be read."""
        return self.reads.counts_now()

    # ----- what /status shows ----------------------------------------------------------------------
    def set_state(self, state: State, why: str) -> None:
        """Every move of the state: through the table (transitions.move), which refuses a move it lacks; a move
        is one log line and one event in /status `events`."""
        moved = transitions.move(self.state, state, time.time(), why)
        if moved is not None:
            self.state, self.since = state, moved.at
            self.events = transitions.kept(self.events, moved)
            log.line(f"state {moved.from_} -> {moved.to}: {why}")

    def status(self) -> ServerStatus:
        return server_status(self)

    def spec_adaptive(self) -> dict | None:
        """What SGLang's adaptive EAGLE chose (activation.adaptive_state), read from the running start's record;
        None unless the running plan asks for --speculative-adaptive."""
        cur = self.current
        if cur is None:
            return None
        return activation.adaptive_state(cur, self.follower.record_for(self.pid))

    def check_backends(self, plan: Plan) -> list[dict]:
        """Judge the running server's start record (activation.py) and keep the verdicts for /status."""
        version = self.follower.version
        facts, note = activation.load_facts()
        self.backends, self.decode_allreduce = activation.assess(plan, self.follower.record_for(self.pid), facts, note)
        self.backends_of = (self.pid, plan.digest(), version)
        return self.backends

    # ----- the monitor -----------------------------------------------------------------------------
    async def monitor(self) -> None:
        """Resolve a switch cut short, then watch: health (always, during a switch too), unplanned
        restarts, crash loops; on the first healthy start, commit the running plan."""
        j = journal.read(self.sd)
        if j is not None:
            await self.lock.acquire()  # held from here: no switch and no commit before it is resolved
            self.recovery = asyncio.create_task(self.recover(j))
        probe = httpx.Timeout(settings.KIT_HEALTH_PROBE_TIMEOUT_S.get(), connect=1)
        async with httpx.AsyncClient(timeout=probe, transport=self.transport) as client:
            while True:
                try:
                    await self._tick(client)
                except Exception:  # a monitor that dies leaves /status stale: report and go on
                    log.exception()
                await asyncio.sleep(settings.KIT_HEALTH_PROBE_PERIOD_S.get())

    async def _probe(self, client: httpx.AsyncClient) -> tuple[str, float]:
        """One /health reading and when it was taken; the caller publishes it with the state it leads to."""
        target = self.switcher.active or self.current
        url = target.server_url if target else self.fallback_url
        try:
            r = await client.get(f"{url}/health")
            health = HEALTH_OK if r.status_code == 200 else f"http {r.status_code}"
        except httpx.TimeoutException:
            health = "timeout"
        except httpx.HTTPError:
            health = HEALTH_DOWN
        return health, time.time()

    async def _tick(self, client: httpx.AsyncClient) -> None:
        busy = self.lock.locked()  # a reading taken while a switch ran describes that switch's servers
        await asyncio.to_thread(self.follower.poll)  # the server log since the last tick, into the start records
        probed = await self._probe(client)
        try:
            info = await asyncio.to_thread(self.sup.info)
        except Exception as exc:
            self.health, self.health_at = probed
            self.last_error = f"supervisord does not answer: {describe(exc)}"
            return
        await self._settle_lines(probed[0], int(info.get("pid") or 0), busy)
        # From here to the state move nothing awaits: /status never shows this reading's health beside the
        # state of the reading before (health "ok" while still "starting").
        self.health, self.health_at = probed
        pid = int(info.get("pid") or 0)
        if busy or self.lock.locked():
            self.pid = pid
            self.unhealthy_restarts = 0  # the switch started this server: its own health gate judges it
            return
        died = decisions.restarted(self.pid, pid)
        self.unhealthy_restarts = decisions.unhealthy_restarts(self.unhealthy_restarts, self.health == HEALTH_OK, died)
        if died:
            self.restarts += 1
            cause = start_lines.cause_text(self.follower.record_for(self.pid))  # the start that died, in its own words
            self.death_cause = cause
            if cause:
                self.last_error = f"server died and was restarted by supervisord; the server log says: {cause}"
        if pid:
            self.pid = pid
        cur = self.current
        reading = Reading(self.health, info.get("statename"), has_plan=cur is not None,
                          backends_read=cur is None or self.backends_of == (self.pid, cur.digest(), self.follower.version),
                          unhealthy_restarts=self.unhealthy_restarts)
        step = transitions.on_reading(self.state, self.resume_state, reading, settings.KIT_START_RETRIES.get())
        if Act.CHECK_BACKENDS in step.actions:
            self.check_backends(cur)  # a server started by serve, or restarted after a crash
        if step.error is not transitions.KEEP:
            self.last_error = step.error
        if step.resume is not None:
            self.resume_state = step.resume
        why = f"health {self.health}, supervisord {info.get('statename')}"
        if Act.CRASH_LOOP in step.actions:
            await self._crash_loop(info)
            return
        if Act.COMMIT in step.actions:
            self._first_healthy(cur, info)
            return
        self.set_state(step.to, why if step.error in (transitions.KEEP, None) else f"{why}: {step.error}")

    async def _settle_lines(self, health: str, pid: int, busy: bool) -> None:
        """A start that answers before its backends were read (serve's, or supervisord's restart after a crash)
        logged its activation lines before it answered; give supervisord the switch's grace to write them, so
        the verdicts and the STARTED entry never call a running backend inactive. A switch judges its own."""
        cur = self.current
        if busy or self.lock.locked() or health != HEALTH_OK or cur is None or not pid:
            return
        if self.settled_for == (pid, cur.digest()):
            return  # once a start: a backend that stays inactive costs one grace, not one per log change

        async def running() -> int:
            return pid

        await settled_activation(self.follower, cur, running)
        self.settled_for = (pid, cur.digest())

    def _first_healthy(self, cur: Plan, info: dict | None = None) -> None:
        """The plan answers: serving; commit it (and say so in history) unless it is the committed one. The entry
        carries the start's time (supervisord's start of the program to this healthy answer): what a switch
        will cost at least, which `bench tune` checks its budget against before it measures anything."""
        self.set_state(State.SERVING, "the plan answers /health")  # STARTING/FAILED -> SERVING
        self.last_error = None
        self.reset_retries()
        if self.last_good and self.last_good.digest() == cur.digest():
            return
        runtime_state.commit(self.sd, cur)
        missing = activation.summary(self.backends)
        entry = Entry(to=label(cur), outcome=Outcome.STARTED, backends=self.backends,
                      decode_allreduce=self.decode_allreduce,
                      error=f"expected backend not active: {missing}" if missing else None)
        took = decisions.seconds_since_start(info or {})
        if took is not None:
            entry.lap("start", took)
            entry.lap("total", took)
        self.last_error = entry.error
        try:
            runtime_state.append_history(self.sd, entry)
        except OSError as exc:  # a link or a FIFO as history.jsonl (refused, atomic.append_line), a full disk
            self.last_error = f"serving, but this start could not be recorded in the history: {describe(exc)}"
        self.last_good = cur

    def reset_retries(self) -> None:
        self.retry = transitions.reset_retry(self.retry, settings.KIT_RETRY_BACKOFF_S.get())

    async def _crash_loop(self, info: dict) -> None:
        """A crash loop (transitions.gave_up): say so in /status, stop a program supervisord still restarts, and
        start the server again with backoff."""
        step = transitions.on_fatal(self.retry, self.clock(), settings.KIT_RETRY_BACKOFF_MAX_S.get())
        self.retry = step.retry
        if step.announce:
            # the last start's own word on why, else that of the last start that died before supervisord's restart
            cause = start_lines.cause_text(self.follower.record_for(0)) or self.death_cause
            self.last_error = decisions.crash_loop_error(info, self.unhealthy_restarts, settings.KIT_START_RETRIES.get(),
                                                         settings.KIT_START_SECS.get(), cause, step.retry.backoff_s)
            self.set_state(State.FAILED, self.last_error)  # any -> FAILED
        if decisions.stop_the_loop(step.start, info.get("statename")):  # supervisord still restarts it: the kit stops it
            await self._stop_looping()
        if step.start:
            self.unhealthy_restarts, self.pid = 0, 0  # the kit's own start is no restart of the loop
            try:
                await asyncio.to_thread(self.sup.start)
            except Exception as exc:
                self.last_error = f"automatic restart failed: {describe(exc)}"

    async def _stop_looping(self) -> None:
        """Stop the program; one that will not stop is tried again at the next reading."""
        try:
            await asyncio.to_thread(self.sup.stop)
        except Exception as exc:  # still looping: the next reading tries again
            self.last_error = f"could not stop the crash loop: {describe(exc)}"

    # ----- a switch cut short ----------------------------------------------------------------------
    async def recover(self, j: journal.Journal) -> Entry:
        """Resolve a journal left by a switch that was cut short: gate what runs now, commit it if it is
        healthy, else roll back to the last committed plan. The outcome `interrupted` goes to history.
        The caller holds the lock; it is released here."""
        try:
            return await self._recover(j)
        finally:
            self.lock.release()

    async def _recover(self, j: journal.Journal) -> Entry:
        t0 = time.monotonic()
        self.set_state(State.RECOVERING, f"resolving switch {j.id}, cut short in phase '{j.phase_text()}'")
        self.switcher.enter(Phase.RECOVERING)
        entry = recovery.interrupted_entry(j)
        got = await recovery.resolve(entry, self.sd, self.sup, self.switcher, self.current, self.last_good)
        self.current, self.last_good, self.last_error = got.current, got.last_good, got.error
        self.set_state(got.done.state, f"switch {j.id} cut short: {got.done.resolution}")
        self.switcher.enter(None)
        entry.lap("total", time.monotonic() - t0)
        try:
            if not runtime_state.history_has(self.sd, j.id):  # its outcome may be in history already
                runtime_state.append_history(self.sd, entry)
                self.reads.recorded(entry)
            journal.clear(self.sd)
        except OSError as exc:
            self.last_error = f"recovered, but could not record it: {describe(exc)}"
        await self._read_pid()
        return entry

    # ----- a switch --------------------------------------------------------------------------------
    async def switch(self, profile: str, spec: str, timeout_s: float | None, spec_params: SpecParams | None = None,
                     adaptive_tiers: AdaptiveTiers | dict | None = None) -> Entry:
        """Validate, then switch under the lock; the history entry. Busy when another switch runs,
        UserError for a plan that does not validate, RuntimeFailure when the journal cannot be written or
        history.jsonl cannot take the entry (a symbolic link, a FIFO in its place: state.history_refusal).
        `spec_params`: an EAGLE point; it is in the plan's flags, so "unchanged" (equal digests) means the same point;
        `adaptive_tiers` likewise (its file's content is in the digest).
        "Unchanged" also needs the same profile name and spec mode: the server is started with the name
        (KIT_ACTIVE_PROFILE), and /status must not keep naming a profile the caller switched away from."""
        if self.lock.locked():
            raise Busy
        plan = await asyncio.to_thread(validated_plan, profile, spec, spec_params, None, adaptive_tiers)
        if self.lock.locked():  # another switch started while this one was validating
            raise Busy
        async with self.lock:  # no await between the check and here: one event loop, so atomic
            before = self.state
            previous = self.current if before in ANSWERING else self.last_good
            same = self.current is not None and (plan.digest(), plan.name, plan.spec) == (
                self.current.digest(), self.current.name, self.current.spec)
            if transitions.unchanged(before, same):
                return Entry(outcome=Outcome.UNCHANGED)
            refusal = runtime_state.history_refusal(self.sd)
            if refusal is not None:  # its outcome could not be recorded: not begun (never appended through a link)
                raise RuntimeFailure(f"cannot record a switch: {refusal}; nothing was changed: move it away (a new "
                                     "history.jsonl is created as a regular file) and retry")
            self.prune_adaptive()  # the configs of earlier candidates; this plan's own is rendered by the switch
            self.set_state(transitions.switch_begins(before), f"switch to {plan.name} + {plan.spec}")  # any -> SWITCHING
            try:
                entry = await self.switcher.run(previous, plan, timeout_s)
            except OSError as exc:  # the journal could not be written: nothing was touched
                self.set_state(before, f"the switch's journal could not be written: {describe(exc)}")
                raise RuntimeFailure(
                    f"cannot record the switch in {self.paths.journal} ({describe(exc)}); "
                    "nothing was changed: free space in KIT_STATE_DIR and retry"
                ) from exc
            self._after_switch(entry, plan, previous, before)
            if entry.history_error is None:  # else the next start records it, as interrupted
                self.reads.recorded(entry)
            gone = await self._read_pid()
            if gone is not None:  # supervisord gone: the answer still says how the switch ended
                self.last_error = self.last_error or f"supervisord does not answer: {gone}"
            return entry

    async def _read_pid(self) -> str | None:
        """The running server's pid, from supervisord; why it could not be read, else None."""
        try:
            info = await asyncio.to_thread(self.sup.info)
            self.pid = int(info.get("pid") or 0)
        except Exception as exc:
            return describe(exc)
        return None

    def prune_adaptive(self) -> None:
        """Tuned adaptive configs that no plan which may start names are removed (state.prune_adaptive): a tune that
        tries many would otherwise leave one file per candidate for ever. At the start of a switch, under its lock:
        the last switch's own config stays until the next switch."""
        keep = (self.current, self.last_good, runtime_state.rendered_plan(self.sd))
        try:
            runtime_state.prune_adaptive(self.sd, keep)
        except Exception:  # housekeeping: never the switch's failure
            log.exception()

    def _after_switch(self, entry: Entry, plan: Plan, previous: Plan | None, before: State) -> None:
        outcome = Outcome(entry.outcome)
        self.last_error = decisions.switch_error(outcome, entry.error, entry.rollback_error)
        if outcome in (Outcome.SWITCHED, Outcome.DEGRADED):
            self.current = self.last_good = plan
            self.backends, self.backends_of = entry.backends or [], None
            self.decode_allreduce = entry.decode_allreduce
            self.reset_retries()  # a crash of the new server starts its own backoff
        elif outcome == Outcome.ROLLED_BACK:
            self.current = previous
            self.reset_retries()
        elif outcome == Outcome.FAILED:
            self.current = plan if previous is None else previous
        self.set_state(transitions.switch_ends(before, outcome), f"switch {outcome}"
                       + (f": {self.last_error}" if self.last_error else ""))  # SWITCHING -> the outcome's state

