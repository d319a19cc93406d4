"""The server's state machine, pure: the table of allowed moves, the one function every move goes
through, and the decisions that turn an observation into the next state and the actions to take.

Nothing here does I/O or reads a clock: lifecycle.py (the monitor, a switch, a recovery) and
switch.py (the phases) feed it what they observed (a /health answer, supervisord's process state,
the journal's phase, the time) and carry out what comes back. A move that is not in the table is
refused with IllegalTransition, so a new path through the runtime is a change to this file first.

States, outcomes and phases are named in states.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from launcher.runtime.core.states import (
    ANSWERING,
    DEAD_STATES,
    LIVE_STATES,
    STATE_AFTER,
    UP_STATES,
    Outcome,
    Phase,
    Resolution,
    State,
)

S = State

# Every move the server's state may make (`set_state` to the state it is in is no move and always fine).
MOVES: dict[State, frozenset[State]] = {
    S.STARTING: frozenset({S.SERVING, S.FAILED, S.SWITCHING, S.RECOVERING}),
    S.SERVING: frozenset({S.DOWN, S.FAILED, S.SWITCHING}),
    S.DEGRADED: frozenset({S.DOWN, S.FAILED, S.SWITCHING, S.SERVING}),
    S.ROLLED_BACK: frozenset({S.DOWN, S.FAILED, S.SWITCHING, S.SERVING}),
    S.DOWN: frozenset({S.SERVING, S.DEGRADED, S.ROLLED_BACK, S.FAILED, S.SWITCHING}),
    S.FAILED: frozenset({S.SERVING, S.SWITCHING}),
    # A switch ends in the state its outcome names (STATE_AFTER), or where it began (aborted, or its
    # journal could not be written): any state a switch can begin in.
    S.SWITCHING: frozenset({S.SERVING, S.DEGRADED, S.ROLLED_BACK, S.FAILED, S.STARTING, S.DOWN}),
    S.RECOVERING: frozenset({S.SERVING, S.ROLLED_BACK, S.FAILED}),
}
# (DEGRADED/ROLLED_BACK -> SERVING: only with no readable plan, when all that is known is that it answers.)

# The phases a switch (or a recovery) steps through; None is "no switch runs". Any phase may end (-> None).
# A rollback stops and starts again, so it steps through stopping, starting and health once more.
PHASE_MOVES: dict[Phase | None, frozenset[Phase]] = {
    None: frozenset({Phase.DRAINING, Phase.STOPPING, Phase.RECOVERING}),
    Phase.DRAINING: frozenset({Phase.STOPPING}),
    Phase.STOPPING: frozenset({Phase.STARTING, Phase.ROLLING_BACK}),
    Phase.STARTING: frozenset({Phase.HEALTH, Phase.ROLLING_BACK}),
    Phase.HEALTH: frozenset({Phase.ACTIVATION, Phase.ROLLING_BACK}),
    Phase.ACTIVATION: frozenset({Phase.ROLLING_BACK}),
    Phase.ROLLING_BACK: frozenset({Phase.STOPPING}),
    Phase.RECOVERING: frozenset({Phase.HEALTH, Phase.ROLLING_BACK}),
}


class IllegalTransition(RuntimeError):
    """A move the table does not allow: a bug in the runtime, never the user's doing."""

    def __init__(self, kind: str, current: object, new: object):
        super().__init__(f"illegal {kind} move {current} -> {new}")
        self.current, self.new = current, new


def change_state(current: State, new: State) -> State:
    """The one gate of every state move: `new`, or IllegalTransition when the table refuses it."""
    if new != current and new not in MOVES[current]:
        raise IllegalTransition("state", current, new)
    return new


EVENTS_KEPT = 50  # the moves /status `events` shows, newest last


@dataclass(frozen=True)
class Move:
    """One move of the state, as the caller logs it and /status `events` shows it."""

    at: float  # the caller's clock (time.time())
    from_: State
    to: State
    why: str


def move(current: State, new: State, at: float, why: str) -> Move | None:
    """change_state, with the move as the event its caller logs and keeps; None when `new` is the state it is in."""
    if change_state(current, new) == current:
        return None
    return Move(at, current, new, why)


def kept(events: tuple[Move, ...], event: Move, cap: int = EVENTS_KEPT) -> tuple[Move, ...]:
    """`events` with `event` last, the oldest dropped past `cap`."""
    return (*events, event)[-cap:]


def change_phase(current: Phase | None, new: Phase | None) -> Phase | None:
    """The one gate of every phase move of a switch or a recovery."""
    if new is not None and new != current and new not in PHASE_MOVES[current]:
        raise IllegalTransition("phase", current, new)
    return new


# ----- the monitor ---------------------------------------------------------------------------------
HEALTH_OK = "ok"
HEALTH_DOWN = "down"  # /health refused or reset: nothing listens (a slow answer reads "timeout" instead)


class Act(StrEnum):
    """What the monitor does besides moving the state."""

    COMMIT = "commit"  # the first healthy start of a plan: commit it (and record it) unless it is the committed one
    CRASH_LOOP = "crash_loop"  # supervisord gave up (FATAL), or the kit did: announce, or start it again after the backoff
    CHECK_BACKENDS = "check_backends"  # a start whose backends were not read yet answers


KEEP = object()  # Step.error: leave last_error as it is


@dataclass(frozen=True)
class Reading:
    """One monitor tick's observation, taken while no switch or recovery held the server."""

    health: str  # "ok", "down", "timeout", "http NNN", "unknown"
    statename: str | None  # supervisord's state of the program
    has_plan: bool = True  # a plan is readable (profile.json or committed.json)
    backends_read: bool = True  # the running start's backends were read already
    unhealthy_restarts: int = 0  # restarts seen since /health last answered ok (or since the kit started it)


@dataclass(frozen=True)
class Step:
    to: State
    actions: tuple[Act, ...] = ()
    error: object = KEEP  # a new last_error (None clears it), or KEEP
    resume: State | None = None  # where `down` goes back to (set when moving to DOWN)


def gave_up(r: Reading, start_retries: int) -> bool:
    """A crash loop: supervisord marked the program FATAL (its starts died within KIT_START_SECS), or it was
    restarted more than `start_retries` times without one healthy answer. A server that loads for longer than
    KIT_START_SECS and then dies never reads FATAL: supervisord restarts it for ever, so the kit counts
    (docs/evidence.md, "Supervision")."""
    return r.statename == "FATAL" or r.unhealthy_restarts > start_retries


def on_reading(state: State, resume: State, r: Reading, start_retries: int = 3) -> Step:
    """The monitor's decision for one reading (lifecycle.Lifecycle._tick carries it out); `start_retries`
    is KIT_START_RETRIES, supervisord's own limit, applied to the restarts it does not count."""
    if not r.has_plan:  # the server may still answer: that is all that is known
        to = S.SERVING if r.health == HEALTH_OK and state != S.SERVING else state
        return Step(to, error=("no readable plan in profile.json or committed.json: the running server's plan is "
                               "unknown; switch to a profile to record one"))
    check = (Act.CHECK_BACKENDS,) if r.health == HEALTH_OK and not r.backends_read else ()
    if gave_up(r, start_retries):
        return Step(state, check + (Act.CRASH_LOOP,))
    if state in ANSWERING and (r.statename not in UP_STATES or r.health == HEALTH_DOWN):
        # SERVING/DEGRADED/ROLLED_BACK -> DOWN
        return Step(S.DOWN, check, f"server down (supervisord: {r.statename}, health: {r.health}); supervisord restarts it",
                    resume=state)
    if state == S.DOWN and r.health == HEALTH_OK and r.statename in UP_STATES:
        return Step(resume, check, None)  # DOWN -> the state it left
    if r.health == HEALTH_OK and state in (S.STARTING, S.FAILED):
        return Step(S.SERVING, check + (Act.COMMIT,), None)  # STARTING/FAILED -> SERVING
    if state == S.STARTING and r.statename in DEAD_STATES:
        return Step(S.FAILED, check, f"server did not start ({r.statename})")  # STARTING -> FAILED
    return Step(state, check)


# ----- crash loops ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Retry:
    """The automatic restart after supervisord gave up: attempts made, when the next is due, its backoff."""

    backoff_s: float
    attempts: int = 0
    next_at: float | None = None


@dataclass(frozen=True)
class RetryStep:
    retry: Retry
    announce: bool = False  # say `failed` with the reason, and when the restart comes
    start: bool = False  # start the program now


def on_fatal(retry: Retry, now: float, backoff_max_s: float) -> RetryStep:
    """supervisord says FATAL at `now`: schedule a restart after the backoff, wait for it, or make it
    (the backoff doubles each time, up to backoff_max_s)."""
    if retry.next_at is None:
        return RetryStep(replace(retry, next_at=now + retry.backoff_s), announce=True)
    if now < retry.next_at:
        return RetryStep(retry)
    return RetryStep(Retry(backoff_s=min(retry.backoff_s * 2, backoff_max_s), attempts=retry.attempts + 1), start=True)


def reset_retry(retry: Retry, backoff_s: float) -> Retry:
    """A healthy start or a switch: no restart pending, the backoff from its first value (attempts stay counted)."""
    return Retry(backoff_s=backoff_s, attempts=retry.attempts)


# ----- a switch ------------------------------------------------------------------------------------
class Refused(Exception):
    """A switch asked for while another switch or a recovery holds the server."""


def switch_begins(state: State) -> State:
    """Any state -> SWITCHING, except while a switch or a recovery already runs."""
    if state in (S.SWITCHING, S.RECOVERING):
        raise Refused(state)
    return change_state(state, S.SWITCHING)


def switch_ends(before: State, outcome: Outcome) -> State:
    """SWITCHING -> the state the outcome names; an aborted switch touched nothing: -> where it began."""
    to = before if outcome == Outcome.ABORTED else STATE_AFTER[outcome]
    return change_state(S.SWITCHING, to)


def unchanged(state: State, same_plan: bool) -> bool:
    """A switch to the plan that serves is no switch (only from SERVING: any other state is repaired)."""
    return same_plan and state == S.SERVING


# ----- a switch cut short --------------------------------------------------------------------------
def recovery_needs_start(statename: str | None) -> bool:
    """Whatever the journal's phase: the program must run before it is gated (stopped mid-switch, or dead)."""
    return statename not in LIVE_STATES


@dataclass(frozen=True)
class Resolved:
    resolution: Resolution
    state: State


def recovery_kept() -> Resolved:
    return Resolved(Resolution.KEPT, change_state(S.RECOVERING, S.SERVING))  # RECOVERING -> SERVING


def recovery_after_gate_failed(has_other_good: bool) -> Resolved | None:
    """The plan that runs failed its gate: FAILED when there is no other committed plan to go back to,
    else None (roll back, then recovery_after_rollback)."""
    if has_other_good:
        return None
    return Resolved(Resolution.FAILED, change_state(S.RECOVERING, S.FAILED))  # RECOVERING -> FAILED


def recovery_after_rollback(ok: bool) -> Resolved:
    if ok:
        return Resolved(Resolution.ROLLED_BACK, change_state(S.RECOVERING, S.ROLLED_BACK))  # RECOVERING -> ROLLED_BACK
    return Resolved(Resolution.FAILED, change_state(S.RECOVERING, S.FAILED))  # RECOVERING -> FAILED
