"""launcher/runtime/core/decisions.py: the lifecycle's decisions besides the state move, on plain values."""

from __future__ import annotations

import pytest

from launcher.runtime.core.decisions import (
    HEALTH_UNKNOWN,
    crash_loop_error,
    has_other_good,
    restarted,
    seconds_since_start,
    shown_health,
    stop_the_loop,
    switch_error,
    unhealthy_restarts,
)
from launcher.runtime.core.states import Outcome


@pytest.mark.parametrize(("last", "pid", "expected"), [
    (100, 200, True),  # a new pid after a known one
    (100, 100, False),  # the same start
    (0, 200, False),  # no start known yet (or the kit's own start): no restart
    (100, 0, False),  # nothing runs now
])
def test_a_restart_is_a_new_pid_after_a_known_one(last, pid, expected):
    assert restarted(last, pid) is expected


def test_unhealthy_restarts_count_until_a_healthy_answer():
    assert unhealthy_restarts(2, healthy=False, restart=True) == 3
    assert unhealthy_restarts(2, healthy=False, restart=False) == 2
    assert unhealthy_restarts(2, healthy=True, restart=False) == 0
    assert unhealthy_restarts(2, healthy=True, restart=True) == 0  # answered ok: the restart is no crash loop
    assert type(unhealthy_restarts(0, healthy=False, restart=True)) is int


def test_a_fatal_crash_loop_says_what_supervisord_said():
    info = {"statename": "FATAL", "spawnerr": "can't find command", "exitstatus": 1}
    text = crash_loop_error(info, 0, start_retries=3, start_secs=20, cause=None, backoff_s=5)
    assert text == ("server crash loop: supervisord gave up after 3 retries (FATAL, can't find command); "
                    "automatic restart in 5s")
    no_err = crash_loop_error({"statename": "FATAL", "exitstatus": 7}, 0, 3, 20, "CUDA out of memory", 12.4)
    assert no_err == ("server crash loop: supervisord gave up after 3 retries (FATAL, exit status 7; the server "
                      "log says: CUDA out of memory); automatic restart in 12s")


def test_a_crash_loop_the_kit_stopped_says_why_supervisord_did_not():
    text = crash_loop_error({"statename": "RUNNING"}, 4, start_retries=3, start_secs=20, cause="boom", backoff_s=10)
    assert text.startswith("server crash loop: restarted 4 times without a healthy answer; each start outlived "
                           "KIT_START_SECS=20s, so supervisord never gave up: the kit stopped it (KIT_START_RETRIES=3")
    assert text.endswith("; the server log says: boom); automatic restart in 10s")


@pytest.mark.parametrize(("starting", "statename", "expected"), [
    (False, "RUNNING", True), (False, "STARTING", True), (False, "BACKOFF", True),
    (False, "FATAL", False), (False, "STOPPED", False), (False, None, False),
    (True, "RUNNING", False),  # the kit starts it now: nothing to stop
])
def test_only_a_program_still_restarting_is_stopped(starting, statename, expected):
    assert stop_the_loop(starting, statename) is expected


def test_the_health_shown_is_of_the_server_that_runs_now():
    assert shown_health("ok", None, 0.0) == HEALTH_UNKNOWN  # no reading yet
    assert shown_health("ok", 10.0, 20.0) == HEALTH_UNKNOWN  # read before a switch changed the server
    assert shown_health("timeout", 20.0, 20.0) == "timeout"
    assert shown_health("ok", 30.0, 20.0) == "ok"


@pytest.mark.parametrize(("info", "expected"), [
    ({"start": 100, "now": 160}, 60.0),
    ({"start": 100, "now": 100}, 0.0),
    ({"start": 100, "now": 90}, None),  # a clock that went back
    ({"start": 0, "now": 160}, None),  # never started
    ({"now": 160}, None),
    ({"start": True, "now": 160}, None),  # a bool is no time
    ({"start": "100", "now": 160}, None),
])
def test_a_start_is_timed_on_supervisords_clock(info, expected):
    assert seconds_since_start(info) == expected


def test_a_recovery_falls_back_only_to_another_committed_plan():
    assert has_other_good("aaaa", "bbbb")
    assert not has_other_good("aaaa", "aaaa")  # the plan that failed is the committed one
    assert has_other_good("aaaa", None)  # no readable rendered plan: any committed one
    assert not has_other_good(None, "bbbb")
    assert not has_other_good(None, None)


def test_a_failed_switch_shows_its_rollback_error_first():
    assert switch_error(Outcome.FAILED, "health timeout", "rollback: health timeout") == "rollback: health timeout"
    assert switch_error(Outcome.FAILED, "health timeout", None) == "health timeout"
    assert switch_error(Outcome.ROLLED_BACK, "health timeout", "ignored") == "health timeout"
    assert switch_error(Outcome.SWITCHED, None, None) is None
