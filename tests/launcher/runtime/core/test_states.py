"""launcher.runtime.core.states: every ending of a switch leaves a named state; only answering states are kept in a router."""

from __future__ import annotations

from launcher.runtime.core.states import ANSWERING, OK_OUTCOMES, STATE_AFTER, Outcome, State


def test_every_outcome_a_switch_can_end_with_has_a_state():
    endings = {Outcome.SWITCHED, Outcome.DEGRADED, Outcome.ROLLED_BACK, Outcome.FAILED, Outcome.ABORTED,
               Outcome.INTERRUPTED}  # interrupted: supervisord stopped answering midway (switch.Switcher._cut_short)
    assert set(STATE_AFTER) == endings


def test_down_and_failed_never_count_as_answering():
    assert {State.DOWN, State.FAILED, State.STARTING, State.SWITCHING, State.RECOVERING}.isdisjoint(ANSWERING)
    assert all(STATE_AFTER[o] in ANSWERING for o in OK_OUTCOMES if o in STATE_AFTER)


def test_names_are_the_strings_the_history_and_status_carry():
    assert State.ROLLED_BACK == "rolled_back" and Outcome.INTERRUPTED == "interrupted"
    assert f"{State.DOWN}" == "down"
