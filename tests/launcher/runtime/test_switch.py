"""launcher.runtime.switch with a fake supervisord and a fake server: the drain, the exit detection of
the health gate, the rollback, the history entry and the journal, in milliseconds."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from helpers_runtime import FakeServer, FakeSupervisor, env, plan, serving, switcher

from launcher.runtime import switch as switch_mod
from launcher.runtime.core.failures import DrainCutShort, HealthTimeout, ServerExited
from launcher.runtime.core.states import Outcome, Phase
from launcher.runtime.core.transitions import IllegalTransition
from launcher.runtime.process.exits import ExitWatch
from launcher.runtime.records import journal
from launcher.runtime.switch import Timeouts
from launcher.state_layout import StatePaths


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    env(monkeypatch)
    monkeypatch.setattr(switch_mod, "LOG_GRACE_S", 0.02)


@pytest.fixture
def rig(tmp_path):
    sup = FakeSupervisor()
    server = FakeServer(sup)
    old, new = plan("baseline"), plan("nccl-tuned")
    serving(tmp_path, old, sup)
    return tmp_path, sup, server, old, new


def run(coro):
    return asyncio.run(coro)


def history(sd) -> list[dict]:
    path = StatePaths(sd).history
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ----- a switch, start to end ------------------------------------------------------------------------
def test_a_good_switch_is_recorded_once_with_every_duration(rig):
    sd, sup, server, old, new = rig
    entry = run(switcher(sd, sup, server).run(old, new, None))
    assert entry.outcome == Outcome.SWITCHED and entry.error is None
    [line] = history(sd)
    assert line == entry.to_json()
    assert line["from"]["profile"] == "baseline" and line["to"]["profile"] == "nccl-tuned" and line["id"]
    assert set(line["durations"]) == {"drain_s", "stop_s", "start_s", "health_s", "activation_s", "total_s"}
    assert "failed_step" not in line and "rollback_error" not in line and "drain_cut_short" not in line
    assert journal.read(sd) is None
    assert json.loads(StatePaths(sd).committed.read_text())["plan"]["name"] == "nccl-tuned"
    assert sup.calls.count("stop") == 1 and sup.calls.count("start") == 1


def test_a_failed_gate_rolls_back_and_the_rollback_time_is_a_duration(rig):
    sd, sup, server, old, new = rig
    sw = switcher(sd, sup, server)
    server.health = lambda: 200 if sw.active is old else 503  # the new plan never answers
    entry = run(sw.run(old, new, None))
    assert entry.outcome == Outcome.ROLLED_BACK and entry.failed_step == "health"
    assert entry.error.startswith("health timeout")
    line = history(sd)[-1]
    assert "rollback_s" in line["durations"] and "rollback_s" not in line
    assert line["outcome"] == "rolled_back" and isinstance(line["log_tail"], list)
    assert json.loads(StatePaths(sd).committed.read_text())["plan"]["name"] == "baseline"
    assert sw.phase is None


def test_a_rollback_that_fails_too_is_failed_with_both_errors(rig):
    sd, sup, server, old, new = rig
    server.health = 503  # nothing answers any more
    entry = run(switcher(sd, sup, server).run(old, new, None))
    assert entry.outcome == Outcome.FAILED
    assert entry.error.startswith("health timeout") and entry.rollback_error.startswith("health timeout")
    assert history(sd)[-1]["rollback_error"] == entry.rollback_error


def test_a_first_switch_without_a_previous_plan_fails_without_rollback(rig):
    sd, sup, server, _, new = rig
    server.health = 503
    entry = run(switcher(sd, sup, server).run(None, new, None))
    assert entry.outcome == Outcome.FAILED and "rollback_s" not in entry.durations
    assert "drain_s" in entry.durations  # no drain ran, and it took no time
    assert history(sd)[-1]["from"] is None


def test_a_full_history_keeps_the_journal_marked_done_for_the_next_start(rig, monkeypatch):
    sd, sup, server, old, new = rig

    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(switch_mod.runtime_state, "append_history", full)
    entry = run(switcher(sd, sup, server).run(old, new, None))
    assert entry.outcome == Outcome.SWITCHED and "No space left" in entry.history_error
    j = journal.read(sd)
    assert (j.phase, j.finished_as, j.phase_text()) == (journal.DONE, Outcome.SWITCHED, "done:switched")


# ----- the drain ---------------------------------------------------------------------------------------
def test_drain_returns_when_no_request_runs_and_when_nothing_listens(rig):
    sd, sup, server, old, _ = rig
    sw = switcher(sd, sup, server)
    server.metrics = 0
    run(sw.drain(old.server_url, 1))
    server.metrics = httpx.ConnectError("refused")
    run(sw.drain(old.server_url, 1))
    assert server.reads == 2


@pytest.mark.parametrize("silence", [httpx.ReadTimeout("slow"), 503, 500, 404, (200, "not { metrics"),
                                     httpx.RemoteProtocolError("reset")])
def test_drain_waits_through_an_answer_that_says_nothing_then_drains(rig, silence):
    """A slow or failing /metrics is asked again (the old drain took it for 'nothing runs' and the stop
    cut the requests off); once it answers 0 the drain ends."""
    sd, sup, server, old, _ = rig
    answers = iter([silence, silence, 2, silence, 0])

    def metrics():
        return next(answers)

    server.metrics = metrics
    run(switcher(sd, sup, server).drain(old.server_url, 5))
    assert server.reads == 5


def test_a_drain_that_never_hears_is_cut_short_aborts_and_says_so(rig):
    sd, sup, server, old, new = rig
    server.metrics = httpx.ReadTimeout("slow")
    with pytest.raises(DrainCutShort) as exc:
        run(switcher(sd, sup, server).drain(old.server_url, 0.05))
    assert "running requests unknown" in str(exc.value) and "did not answer" in exc.value.last
    entry = run(switcher(sd, sup, server).run(old, new, None))
    assert entry.outcome == Outcome.ABORTED and entry.error.startswith("drain timeout")
    line = history(sd)[-1]
    assert line["drain_cut_short"].startswith("/metrics did not answer") and line["outcome"] == "aborted"
    assert sup.stops == 0 and sup.calls.count("start") == 0  # nothing was touched
    assert journal.read(sd) is None


def test_requests_still_running_at_the_deadline_abort_the_switch(rig):
    sd, sup, server, old, new = rig
    server.metrics = 3
    entry = run(switcher(sd, sup, server).run(old, new, None))
    assert entry.outcome == Outcome.ABORTED and "requests still running" in entry.error
    assert entry.drain_cut_short == "3 request(s) running" and sup.stops == 0


# ----- a dead server, seen from supervisord's process info -------------------------------------------
def test_exit_watch_sees_an_exit_between_two_polls():
    """The server exits and supervisord restarts it before the next poll: the state reads STARTING
    again, but the pid changed (the stack test's load made this read as a health timeout)."""
    sup = FakeSupervisor()
    sup.stop()
    w = ExitWatch.before_start(sup.info())
    sup.start()
    assert w.exited(sup.info()) is None
    sup.run()
    assert w.exited(sup.info()) is None
    sup.crash()
    sup.respawn(0.0)
    reason = w.exited(sup.info())
    assert reason and "restarted it as pid" in reason and "exit status 1" in reason


def test_exit_watch_sees_a_respawn_whose_pid_it_never_saw_change():
    """Both exits happened before the first poll: the later `stop` says it, whatever the state."""
    sup = FakeSupervisor()
    sup.stop()
    w = ExitWatch.before_start(sup.info())
    sup.tick(1)
    sup.start()
    sup.crash()
    sup.respawn(1.5)
    assert "stopped since the start request" in w.exited(sup.info())


@pytest.mark.parametrize("state", ["BACKOFF", "EXITED", "FATAL", "STOPPED"])
def test_exit_watch_sees_each_dead_state(state):
    sup = FakeSupervisor()
    w = ExitWatch.before_start(sup.info())
    sup.start()
    sup.crash(state)
    assert w.exited(sup.info()).startswith(state)


def test_exit_watch_of_a_server_it_did_not_start_needs_a_change():
    sup = FakeSupervisor()
    sup.spawn()
    sup.run()
    w = ExitWatch.running(sup.info())
    assert w.exited(sup.info()) is None
    sup.crash()
    sup.respawn(0)
    assert w.exited(sup.info())


def test_the_gate_fails_on_an_exit_between_polls_and_quotes_it_as_an_exit(rig):
    sd, sup, server, old, new = rig
    server.health = 503  # loading: the gate keeps polling
    polls = {"n": 0}

    def flap(s: FakeSupervisor) -> None:  # between the 2nd and 3rd poll: exit and restart
        polls["n"] += 1
        if polls["n"] == 3 and s.state == "STARTING":
            s.crash()
            s.respawn(0.0)

    sw = switcher(sd, sup, server, Timeouts(drain_s=1, stop_s=1, health_s=5, rollback_s=5))
    server.health = lambda: 200 if sw.active is old else 503

    async def go():
        await sw.stop()
        await sw.start(new)
        sup.on_info = flap
        polls["n"] = 0
        await sw.health_gate(new.server_url, 5)

    with pytest.raises(ServerExited) as exc:
        run(go())
    assert "server exited during start-up" in str(exc.value) and "restarted it as pid" in str(exc.value)


def test_a_switch_to_a_server_that_dies_is_rolled_back_as_exited_not_as_a_timeout(rig):
    sd, sup, server, old, new = rig
    sw = switcher(sd, sup, server)
    server.health = lambda: 200 if sw.active is old else 503

    def dies(s: FakeSupervisor) -> None:
        since_start = len(s.calls) - s.calls.index("start") - 1 if "start" in s.calls else 0
        if since_start == 2:  # the gate's first poll, after the switch read the pid it started
            s.on_info = None
            s.crash()
            s.respawn(1.0)  # supervisord's retry: STARTING again by the next poll, stop in the same second

    sup.on_info = dies
    entry = run(sw.run(old, new, None))
    assert entry.outcome == Outcome.ROLLED_BACK and entry.failed_step == "health"
    assert "exited" in entry.error and "timeout" not in entry.error


def test_health_timeout_is_its_own_type(rig):
    sd, sup, server, _, new = rig
    server.health = 503
    sw = switcher(sd, sup, server)
    sw.phase = Phase.STARTING
    with pytest.raises(HealthTimeout):
        run(sw.health_gate(new.server_url, 0.02))


# ----- phases --------------------------------------------------------------------------------------------
def test_phases_step_through_the_table(rig, monkeypatch):
    sd, sup, server, old, new = rig
    sw = switcher(sd, sup, server)
    seen: list = []
    real = sw.enter

    def spy(phase):
        real(phase)
        seen.append(phase)

    monkeypatch.setattr(sw, "enter", spy)
    server.health = lambda: 200 if sw.active is old else 503
    run(sw.run(old, new, None))
    assert seen == [Phase.DRAINING, Phase.STOPPING, Phase.STARTING, Phase.HEALTH, Phase.ROLLING_BACK,
                    Phase.STOPPING, Phase.STARTING, Phase.HEALTH, None]


def test_a_phase_out_of_order_is_refused(rig):
    sd, sup, server, _, _ = rig
    sw = switcher(sd, sup, server)
    with pytest.raises(IllegalTransition):
        sw.enter(Phase.HEALTH)



# ----- supervisord gone mid-switch ----------------------------------------------------------------------
GONE = "supervisord stopped answering on /state/supervisor.sock (connection refused)"


def _gone_when(sup, when):
    def info(_sup):
        if when():
            raise switch_mod.SupervisorGone(GONE)

    sup.on_info = info


@pytest.mark.parametrize("where", ["health", "rollback"])
def test_supervisord_gone_mid_switch_is_interrupted_and_left_to_the_next_start(rig, where):
    """supervisord killed midway: neither the switch nor a rollback can go on. Outcome `interrupted` with a readable
    error (was `failed` with a raw ConnectionRefusedError); the journal stays, with the reason, for the next start to
    resolve and record: no history line now."""
    sd, sup, server, old, new = rig
    sw = switcher(sd, sup, server)
    if where == "health":
        _gone_when(sup, lambda: sw.phase == Phase.HEALTH)
    else:
        server.health = lambda: 200 if sw.active is old else 503  # the gate fails: a rollback begins
        _gone_when(sup, lambda: journal.read(sd).phase == Phase.ROLLING_BACK)
    entry = run(sw.run(old, new, None))
    phase = "health" if where == "health" else "rolling_back"
    assert entry.outcome == Outcome.INTERRUPTED and entry.interrupted_phase == phase
    assert entry.error.startswith(f"the switch was cut short in phase '{phase}': {GONE}")
    assert "the next `launcher serve`" in entry.error and "ConnectionRefusedError" not in entry.error
    if where == "rollback":
        assert "(before that: health timeout" in entry.error
    assert history(sd) == [] and sw.phase is None
    j = journal.read(sd)
    assert (j.id, str(j.phase), j.cut_short) == (entry.id, phase, GONE)
    assert "total_s" in entry.durations


def test_supervisor_calls_tell_a_dead_supervisord_from_a_fault(tmp_path):
    from launcher.runtime.process.supervisor_rpc import Supervisor

    sup = Supervisor(tmp_path / "supervisor.sock")
    with pytest.raises(switch_mod.SupervisorGone, match="its socket is gone"):
        sup.info()
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "supervisor.sock"))  # bound, never listening: refused
    try:
        with pytest.raises(switch_mod.SupervisorGone, match=r"supervisor.sock \(connection refused\)"):
            sup.stop()
    finally:
        s.close()
