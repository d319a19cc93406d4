"""launcher.runtime.core.transitions: the table of moves, the one gate every move goes through, and the pure
decisions (monitor readings, crash-loop retries, a switch's ends, a recovery's resolution)."""

from __future__ import annotations

import itertools

import pytest

from launcher.runtime.core import transitions as t
from launcher.runtime.core.states import ANSWERING, STATE_AFTER, Outcome, Phase, Resolution, State
from launcher.runtime.core.transitions import Act, Reading, Retry

ALLOWED = [(a, b) for a, targets in t.MOVES.items() for b in targets]
REFUSED = [(a, b) for a, b in itertools.product(State, State) if a != b and b not in t.MOVES[a]]
PHASES = [None, *Phase]


def test_every_state_has_a_row():
    assert set(t.MOVES) == set(State) and set(t.PHASE_MOVES) == set(PHASES)


@pytest.mark.parametrize(("a", "b"), ALLOWED, ids=[f"{a}->{b}" for a, b in ALLOWED])
def test_every_allowed_move_passes(a, b):
    assert t.change_state(a, b) == b


@pytest.mark.parametrize(("a", "b"), REFUSED, ids=[f"{a}->{b}" for a, b in REFUSED])
def test_every_other_move_is_refused_by_name(a, b):
    with pytest.raises(t.IllegalTransition, match=f"illegal state move {a} -> {b}") as exc:
        t.change_state(a, b)
    assert (exc.value.current, exc.value.new) == (a, b)


def test_refused_moves_include_the_ones_that_would_lose_track():
    for a, b in [(State.RECOVERING, State.SWITCHING), (State.SWITCHING, State.RECOVERING),
                 (State.SERVING, State.ROLLED_BACK), (State.FAILED, State.DOWN), (State.SERVING, State.STARTING)]:
        assert (a, b) in REFUSED


def test_staying_is_no_move():
    assert all(t.change_state(s, s) == s for s in State)


def test_phase_moves():
    for a, targets in t.PHASE_MOVES.items():
        for b in targets:
            assert t.change_phase(a, b) == b
        assert t.change_phase(a, None) is None  # any phase may end
    with pytest.raises(t.IllegalTransition, match="phase"):
        t.change_phase(None, Phase.HEALTH)
    with pytest.raises(t.IllegalTransition):
        t.change_phase(Phase.ACTIVATION, Phase.DRAINING)


# ----- the monitor's readings ------------------------------------------------------------------------
def test_first_healthy_start_serves_and_commits():
    for s in (State.STARTING, State.FAILED):
        step = t.on_reading(s, State.SERVING, Reading("ok", "RUNNING"))
        assert (step.to, step.actions, step.error) == (State.SERVING, (Act.COMMIT,), None)


@pytest.mark.parametrize("state", sorted(ANSWERING))
@pytest.mark.parametrize(("health", "statename"), [("down", "RUNNING"), ("ok", "EXITED"), ("timeout", "BACKOFF")])
def test_an_answering_server_that_stops_is_down_and_remembers_where_it_was(state, health, statename):
    step = t.on_reading(state, State.SERVING, Reading(health, statename))
    assert step.to == State.DOWN and step.resume == state and "server down" in step.error
    back = t.on_reading(State.DOWN, step.resume, Reading("ok", "RUNNING"))
    assert (back.to, back.error) == (state, None)


def test_a_slow_health_is_not_down():
    assert t.on_reading(State.SERVING, State.SERVING, Reading("timeout", "RUNNING")).to == State.SERVING


def test_down_stays_down_until_it_answers():
    assert t.on_reading(State.DOWN, State.DEGRADED, Reading("down", "STARTING")).to == State.DOWN


def test_a_first_start_that_ends_fails():
    step = t.on_reading(State.STARTING, State.SERVING, Reading("down", "EXITED"))
    assert step.to == State.FAILED and step.error == "server did not start (EXITED)"


@pytest.mark.parametrize("state", [State.STARTING, State.SERVING, State.DOWN, State.FAILED, State.DEGRADED])
def test_fatal_is_the_crash_loop_from_anywhere(state):
    step = t.on_reading(state, State.SERVING, Reading("down", "FATAL"))
    assert step.actions == (Act.CRASH_LOOP,) and step.error is t.KEEP


@pytest.mark.parametrize("state", [State.STARTING, State.DOWN, State.FAILED])
def test_more_restarts_than_supervisords_retries_without_health_are_a_crash_loop(state):
    """A server that dies after KIT_START_SECS never reads FATAL: the kit counts its restarts itself."""
    assert t.on_reading(state, State.SERVING, Reading("down", "STARTING", unhealthy_restarts=3), 3).actions == ()
    step = t.on_reading(state, State.SERVING, Reading("down", "STARTING", unhealthy_restarts=4), 3)
    assert step.actions == (Act.CRASH_LOOP,)
    assert t.gave_up(Reading("down", "FATAL"), 3) and not t.gave_up(Reading("down", "RUNNING", unhealthy_restarts=3), 3)


def test_backends_are_read_once_per_healthy_start():
    step = t.on_reading(State.SERVING, State.SERVING, Reading("ok", "RUNNING", backends_read=False))
    assert step.actions == (Act.CHECK_BACKENDS,) and step.to == State.SERVING
    assert t.on_reading(State.SERVING, State.SERVING, Reading("ok", "RUNNING")).actions == ()


def test_without_a_plan_it_serves_when_it_answers_and_says_why():
    step = t.on_reading(State.STARTING, State.SERVING, Reading("ok", "RUNNING", has_plan=False))
    assert step.to == State.SERVING and Act.COMMIT not in step.actions and "no readable plan" in step.error
    assert t.on_reading(State.STARTING, State.SERVING, Reading("down", "EXITED", has_plan=False)).to == State.STARTING


# ----- crash loop: retry with backoff ----------------------------------------------------------------------
def test_crash_loop_announces_waits_retries_and_doubles_the_backoff_to_its_cap():
    r = Retry(backoff_s=5)
    step = t.on_fatal(r, now=100, backoff_max_s=12)
    assert step.announce and not step.start and step.retry.next_at == 105
    assert t.on_fatal(step.retry, now=104.9, backoff_max_s=12) == t.RetryStep(step.retry)  # not yet
    step = t.on_fatal(step.retry, now=105, backoff_max_s=12)
    assert step.start and (step.retry.attempts, step.retry.next_at, step.retry.backoff_s) == (1, None, 10)
    step = t.on_fatal(step.retry, now=200, backoff_max_s=12)  # FATAL again: announce the next wait
    assert step.announce and step.retry.next_at == 210
    step = t.on_fatal(step.retry, now=210, backoff_max_s=12)
    assert step.start and step.retry.backoff_s == 12 and step.retry.attempts == 2


def test_a_healthy_start_resets_the_backoff_but_keeps_the_count():
    r = t.reset_retry(Retry(backoff_s=80, attempts=3, next_at=500), 5)
    assert (r.backoff_s, r.attempts, r.next_at) == (5, 3, None)


# ----- a switch ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", [s for s in State if s not in (State.SWITCHING, State.RECOVERING)])
def test_a_switch_begins_from_any_settled_state_and_can_end_where_it_began(state):
    assert t.switch_begins(state) == State.SWITCHING
    assert t.switch_ends(state, Outcome.ABORTED) == state


@pytest.mark.parametrize("state", [State.SWITCHING, State.RECOVERING])
def test_no_switch_while_a_switch_or_a_recovery_holds_the_server(state):
    with pytest.raises(t.Refused):
        t.switch_begins(state)


@pytest.mark.parametrize("outcome", [o for o in STATE_AFTER if o != Outcome.ABORTED])
def test_a_switch_ends_in_its_outcomes_state(outcome):
    assert t.switch_ends(State.SERVING, outcome) == STATE_AFTER[outcome]


def test_only_a_serving_plan_is_unchanged():
    assert t.unchanged(State.SERVING, True)
    assert not t.unchanged(State.ROLLED_BACK, True) and not t.unchanged(State.SERVING, False)


# ----- a switch cut short --------------------------------------------------------------------------------
def test_recovery_resolutions():
    assert t.recovery_kept() == t.Resolved(Resolution.KEPT, State.SERVING)
    assert t.recovery_after_gate_failed(False) == t.Resolved(Resolution.FAILED, State.FAILED)
    assert t.recovery_after_gate_failed(True) is None  # roll back first
    assert t.recovery_after_rollback(True) == t.Resolved(Resolution.ROLLED_BACK, State.ROLLED_BACK)
    assert t.recovery_after_rollback(False) == t.Resolved(Resolution.FAILED, State.FAILED)


@pytest.mark.parametrize(("statename", "start"), [("STOPPED", True), ("EXITED", True), ("FATAL", True),
                                                  ("RUNNING", False), ("STARTING", False), ("BACKOFF", False)])
def test_recovery_starts_the_program_only_when_nothing_runs(statename, start):
    assert t.recovery_needs_start(statename) is start


def test_a_move_is_returned_as_its_event_and_no_move_is_none():
    m = t.move(State.SERVING, State.SWITCHING, 12.5, "switch to fused + off")
    assert m == t.Move(12.5, State.SERVING, State.SWITCHING, "switch to fused + off")
    assert t.move(State.SERVING, State.SERVING, 13.0, "same") is None
    with pytest.raises(t.IllegalTransition):
        t.move(State.STARTING, State.ROLLED_BACK, 14.0, "no such move")


def test_the_events_kept_are_the_newest_up_to_the_cap():
    events: tuple = ()
    for i in range(t.EVENTS_KEPT + 5):
        events = t.kept(events, t.Move(float(i), State.SERVING, State.DOWN, str(i)))
    assert len(events) == t.EVENTS_KEPT and events[-1].why == str(t.EVENTS_KEPT + 4)
    assert events[0].why == "5"
