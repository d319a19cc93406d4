"""bench/control/hold.py: a second tune exits 2 naming the first, the hold is renewed and given back, a lost
hold stops the tune before its next cell."""

from __future__ import annotations

import threading

import pytest

from bench.control import hold as hold_mod
from bench.control.hold import MeasureHold
from launcher.errors import RuntimeFailure, UserError
from launcher.runtime.api.bodies import HoldAnswer, ReleaseAnswer


class FakeControl:
    url = "http://control"

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls: list[tuple] = []
        self.where: list[dict] = []
        self.renewed = threading.Event()

    def hold(self, holder, ttl_s, hold_id=None, **where):
        self.calls.append(("hold", holder, ttl_s, hold_id))
        self.where.append(where)
        if hold_id is not None:
            self.renewed.set()
        answer = self.answers.pop(0) if self.answers else (200, {"id": hold_id})
        if isinstance(answer, Exception):
            raise answer
        return HoldAnswer.of(*answer)  # as the control client parses (HTTP status, body)

    def release(self, hold_id):
        self.calls.append(("release", hold_id))
        return ReleaseAnswer.of(200, {"released": True})


def said():
    lines: list[str] = []
    return lines, lambda text, style=None: lines.append(text)


def test_granted_renewed_and_given_back(monkeypatch):
    monkeypatch.setattr(hold_mod, "RENEW_EVERY_S", 0.01)
    control = FakeControl([(200, {"id": "h1"})])
    lines, say = said()
    with MeasureHold(control, "tune A", say) as h:
        assert control.renewed.wait(10)
        h.check()
    assert ("hold", "tune A", hold_mod.TTL_S, "h1") in control.calls
    assert control.calls[-1] == ("release", "h1")


def test_a_second_tune_is_exit_2_naming_the_first():
    control = FakeControl([(409, {"error": "held by bench tune (pid 42 on box, --out a, started t)"})])
    with pytest.raises(UserError, match="pid 42 on box.*nothing was switched"):
        with MeasureHold(control, "tune B", said()[1]):
            pytest.fail("entered")
    assert [c[0] for c in control.calls] == ["hold"]  # nothing to give back


def test_a_lost_hold_stops_the_tune_and_is_not_released(monkeypatch):
    monkeypatch.setattr(hold_mod, "RENEW_EVERY_S", 0.01)
    control = FakeControl([(200, {"id": "h1"}), RuntimeFailure("unreachable"), (409, {"error": "held by tune C"})])
    with MeasureHold(control, "tune A", said()[1]) as h:
        h._renewer.join(10)
        with pytest.raises(RuntimeFailure, match="lost its hold.*held by tune C"):
            h.check()
    assert all(c[0] == "hold" for c in control.calls)


@pytest.mark.parametrize("answer, error", [((401, {"error": "wrong token"}), UserError),
                                           ((500, {"error": "disk full"}), RuntimeFailure)])
def test_a_refused_hold_measures_nothing(answer, error):
    with pytest.raises(error):
        with MeasureHold(FakeControl([answer]), "tune A", said()[1]):
            pytest.fail("entered")


def test_an_older_control_api_without_hold_is_said_and_the_tune_goes_on():
    control = FakeControl([(404, {"error": "Not Found"})])
    lines, say = said()
    with MeasureHold(control, "tune A", say) as h:
        h.check()
    assert "not kept out" in lines[0] and [c[0] for c in control.calls] == ["hold"]


def dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: no process of that pid now (a reuse within the test is vanishingly unlikely)


@pytest.mark.stack
def test_a_holder_of_this_host_whose_pid_is_gone_is_taken_over():
    import os
    import socket

    gone = dead_pid()
    refusal = (409, {"error": "held by tune A", "tune_hold": {"holder": "tune A", "host": socket.gethostname(), "pid": gone}})
    control = FakeControl([refusal, (200, {"id": "h2"})])
    lines, say = said()
    with MeasureHold(control, "tune B", say) as h:
        assert h.id == "h2"
    assert control.where[0] == {"host": socket.gethostname(), "pid": os.getpid()}
    assert control.where[1]["take_over_pid"] == gone and f"pid {gone}" in lines[0]


@pytest.mark.parametrize("holder", [
    {"host": "another-host", "pid": 1},  # cannot be looked at from here
    {"host": None, "pid": None},  # an older control API
])
def test_a_live_or_foreign_holder_is_never_taken_over(holder):
    import os
    import socket

    if holder["host"] is None:
        holder = {"holder": "tune A"}
    live = {"holder": "tune A", "host": socket.gethostname(), "pid": os.getppid()}
    for held in (holder, live):
        control = FakeControl([(409, {"error": "held by tune A", "tune_hold": held})])
        with pytest.raises(UserError, match="held by tune A"):
            with MeasureHold(control, "tune B", said()[1]):
                pytest.fail("entered")
        assert len(control.calls) == 1


@pytest.mark.parametrize("pid", [2 ** 40, 2 ** 63, 4194305, 0, -1, True, "12", 1.0, None])
def test_bug_4_something_that_is_no_pid_of_this_host_is_not_alive_and_raises_nothing(pid):
    """Defect 4 (client side): alive(2**40) raised OverflowError (a control API had granted that pid); 0 and -1
    would have signalled a process group, or every process."""
    assert hold_mod.alive(pid) is False


@pytest.mark.stack
def test_alive_still_tells_a_live_pid_from_a_gone_one():
    import os

    assert hold_mod.alive(os.getpid()) and hold_mod.alive(1) and hold_mod.PID_MAX == 4194304
    assert not hold_mod.alive(dead_pid())


@pytest.mark.parametrize("pid", [2 ** 40, 4194305, 0, -7, True, "123"])
def test_bug_4_a_holder_whose_pid_is_no_pid_of_this_host_is_not_taken_over(pid):
    """Nothing shows such a holder gone, so its hold is not taken over (a second tune exits 2 naming it, as for a
    live holder); it lapses within its TTL unless something renews it."""
    import socket

    held = {"holder": "tune A", "host": socket.gethostname(), "pid": pid}
    control = FakeControl([(409, {"error": "held by tune A", "tune_hold": held})])
    with pytest.raises(UserError, match="held by tune A"):
        with MeasureHold(control, "tune B", said()[1]):
            pytest.fail("entered")
    assert len(control.calls) == 1 and "take_over_pid" not in control.where[0]
