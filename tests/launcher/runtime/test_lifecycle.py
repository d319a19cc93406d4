"""launcher.runtime.lifecycle with a fake supervisord, a fake server and a fake clock: the monitor's
moves, the crash loop's backoff, a switch's bookkeeping and the recovery of a switch cut short at
each journal phase, in milliseconds."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest
from helpers_runtime import FakeServer, FakeSupervisor, env, plan, serving, switcher

from launcher.errors import RuntimeFailure
from launcher.profiles.render import write_plan
from launcher.runtime import history_reads
from launcher.runtime import switch as switch_mod
from launcher.runtime.core.states import Outcome, Phase, State
from launcher.runtime.core.transitions import IllegalTransition
from launcher.runtime.lifecycle import Busy, Lifecycle
from launcher.runtime.process.server_exec import START_MARKER
from launcher.runtime.records import journal
from launcher.state_layout import StatePaths


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    env(monkeypatch)
    monkeypatch.setenv("KIT_RETRY_BACKOFF_S", "5")
    monkeypatch.setenv("KIT_RETRY_BACKOFF_MAX_S", "12")
    monkeypatch.setattr(switch_mod, "LOG_GRACE_S", 0.02)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Rig:
    def __init__(self, sd, committed: bool = True, profile: str = "baseline", spec: str = "off"):
        self.sd, self.sup, self.clock = sd, FakeSupervisor(), Clock()
        self.server = FakeServer(self.sup)
        self.plan = plan(profile, spec)
        serving(sd, self.plan, self.sup, commit=committed)
        self.lc = self.make()

    def make(self) -> Lifecycle:
        sw = switcher(self.sd, self.sup, self.server)
        lc = Lifecycle(self.sd, supervisor=self.sup, switcher=sw, transport=self.server.transport(), clock=self.clock)
        sw.follower = lc.follower
        return lc

    async def tick(self, n: int = 1) -> None:
        async with httpx.AsyncClient(transport=self.server.transport()) as client:
            for _ in range(n):
                await self.lc._tick(client)

    def history(self) -> list[dict]:
        path = StatePaths(self.sd).history
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run(coro):
    return asyncio.run(coro)


# ----- the monitor ----------------------------------------------------------------------------------------
def test_a_first_healthy_start_serves_and_is_committed_once(tmp_path):
    rig = Rig(tmp_path, committed=False)
    assert rig.lc.state == State.STARTING
    run(rig.tick(3))
    assert rig.lc.state == State.SERVING and rig.lc.status().to_json()["health"] == "ok"
    [entry] = rig.history()
    assert entry["outcome"] == "started" and entry["to"]["profile"] == "baseline" and "id" not in entry
    assert set(entry) == {"ts", "from", "to", "outcome", "durations", "error", "backends", "decode_allreduce"}
    started = rig.sup.info()
    assert entry["durations"] == {"start_s": started["now"] - started["start"], "total_s": started["now"] - started["start"]}
    assert json.loads(StatePaths(tmp_path).committed.read_text())["plan"]["name"] == "baseline"


def test_status_never_shows_a_new_health_reading_beside_the_old_state(tmp_path):
    """The reading is published with the state it leads to: while the tick waits on supervisord, /status still
    shows the reading before (a test saw health "ok" beside state "starting" in that window)."""
    rig = Rig(tmp_path, committed=False)
    seen: list[tuple[str, str]] = []
    rig.sup.on_info = lambda _sup: seen.append((rig.lc.status().to_json()["health"], rig.lc.status().to_json()["state"]))
    run(rig.tick())
    assert seen and seen[0] == ("unknown", "starting"), seen
    st = rig.lc.status().to_json()
    assert (st["health"], st["state"]) == ("ok", "serving")


def test_a_start_that_answers_before_supervisord_wrote_its_lines_is_judged_on_them(tmp_path, monkeypatch):
    """The server logs its activation lines before it answers, but supervisord writes them to the log on its own
    time: the tick read the log first, so the line arrives between that read and the healthy answer. The first
    healthy start is judged after the log caught up (the switch's grace), never called inactive."""
    monkeypatch.setattr(switch_mod, "LOG_GRACE_S", 5.0)
    rig = Rig(tmp_path, committed=False, spec="eagle3-adaptive")
    log_path = StatePaths(tmp_path).server_log
    p = rig.plan
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(f"{START_MARKER}{p.name} spec {p.spec} digest {p.digest()} pid {rig.sup.info()['pid']} start 1: x\n")
    poll = rig.lc.follower.poll
    late = ["[2026-12-03 10:00:01 TP0] AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]\n"]

    def poll_then_line_lands(*args):
        more = poll(*args)
        if late:  # written by supervisord just after the tick's read
            with log_path.open("a") as f:
                f.write(late.pop())
        return more

    monkeypatch.setattr(rig.lc.follower, "poll", poll_then_line_lands)
    run(rig.tick())
    assert rig.lc.state == State.SERVING
    [entry] = rig.history()
    [adaptive] = [b for b in entry["backends"] if b["name"] == "spec-adaptive"]
    assert (adaptive["verdict"], adaptive["candidate_steps"], entry["error"]) == ("active", [1, 3, 5, 7], None), entry


def test_a_dead_server_reads_down_and_comes_back_counted(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    assert rig.lc.state == State.SERVING and rig.history() == []  # committed already: no entry
    rig.sup.crash()
    run(rig.tick())
    assert rig.lc.state == State.DOWN and "server down" in rig.lc.last_error
    rig.sup.respawn()
    rig.sup.run()
    run(rig.tick())
    st = rig.lc.status().to_json()
    assert (st["state"], st["restarts"], st["last_error"]) == ("serving", 1, None)


def test_a_first_start_that_dies_fails(tmp_path):
    rig = Rig(tmp_path)
    rig.sup.crash("EXITED")
    run(rig.tick())
    assert rig.lc.state == State.FAILED and rig.lc.last_error == "server did not start (EXITED)"


def _die_after_start_secs(rig) -> None:
    """supervisord's restart of a server that outlived KIT_START_SECS: a new pid, never FATAL, never healthy."""
    rig.sup.crash()
    rig.sup.respawn()
    run(rig.tick())


def test_restarts_without_health_past_the_retries_are_a_crash_loop_the_kit_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_START_RETRIES", "2")
    monkeypatch.setenv("KIT_RETRY_BACKOFF_S", "5")
    rig = Rig(tmp_path)
    rig.server.health = 503
    rig.sup.spawn()
    run(rig.tick())
    for _ in range(2):  # two restarts: supervisord's own limit, not yet a loop
        _die_after_start_secs(rig)
    assert rig.lc.state == State.STARTING and rig.sup.stops == 0
    _die_after_start_secs(rig)  # the third: given up
    st = rig.lc.status().to_json()
    assert st["state"] == "failed" and rig.sup.state == "STOPPED" and rig.sup.stops == 1, st
    assert "crash loop" in st["last_error"] and "restarted 3 times without a healthy answer" in st["last_error"]
    assert "KIT_START_SECS" in st["last_error"] and "restart in 5s" in st["last_error"]
    assert st["retry"]["next_at"] == 1005.0
    run(rig.tick())
    assert rig.sup.calls.count("start") == 0 and rig.sup.stops == 1  # stopped stays stopped through the backoff
    rig.clock.t = 1005
    rig.server.health = 200
    run(rig.tick())  # the kit's restart, which answers this time
    assert rig.sup.calls.count("start") == 1 and rig.lc.retries == 1
    rig.sup.run()
    run(rig.tick())
    st = rig.lc.status().to_json()
    assert st["state"] == "serving" and st["last_error"] is None and st["retry"]["next_at"] is None


def test_a_healthy_answer_between_restarts_is_no_crash_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_START_RETRIES", "1")
    rig = Rig(tmp_path)
    rig.sup.spawn()
    run(rig.tick())
    for _ in range(4):  # each restart answers before it dies: a server that crashes now and then, not a loop
        _die_after_start_secs(rig)
        run(rig.tick())
    assert rig.lc.state == State.SERVING and rig.sup.stops == 0 and rig.lc.restarts == 4


def test_a_crash_loop_fails_then_retries_with_a_doubling_backoff(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    rig.sup.crash("FATAL")
    run(rig.tick())
    st = rig.lc.status().to_json()
    assert st["state"] == "failed" and "crash loop" in st["last_error"] and "restart in 5s" in st["last_error"]
    assert st["retry"] == {"attempts": 0, "next_at": 1005.0}
    rig.clock.t = 1004
    run(rig.tick())
    assert rig.sup.calls.count("start") == 0  # the backoff holds
    rig.clock.t = 1005
    rig.sup.spawnerr = ""

    def dies_again(s: FakeSupervisor) -> None:
        s.crash("FATAL")

    rig.sup.on_start = dies_again
    run(rig.tick())
    assert rig.sup.calls.count("start") == 1 and rig.lc.retries == 1
    run(rig.tick())  # FATAL again: the next wait is twice as long
    assert rig.lc.status().to_json()["retry"]["next_at"] == 1015.0 and "restart in 10s" in rig.lc.last_error
    rig.clock.t = 1015
    rig.sup.on_start = None
    run(rig.tick())
    assert rig.lc.retries == 2 and rig.lc.retry.backoff_s == 12  # capped at KIT_RETRY_BACKOFF_MAX_S
    rig.sup.run()
    run(rig.tick())
    assert rig.lc.state == State.SERVING and rig.lc.retry.next_at is None and rig.lc.retry.backoff_s == 5


def test_the_monitor_moves_nothing_while_a_switch_holds_the_lock(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())

    async def held():
        await rig.lc.lock.acquire()
        rig.sup.crash()
        async with httpx.AsyncClient(transport=rig.server.transport()) as client:
            await rig.lc._tick(client)
        rig.lc.lock.release()

    run(held())
    assert rig.lc.state == State.SERVING


def test_every_state_move_goes_through_the_table(tmp_path):
    rig = Rig(tmp_path)
    with pytest.raises(IllegalTransition):
        rig.lc.set_state(State.ROLLED_BACK, "no such move")  # STARTING -> ROLLED_BACK is no move the runtime makes
    assert rig.lc.state == State.STARTING


# ----- a switch ---------------------------------------------------------------------------------------------
def test_a_switch_moves_through_switching_and_records_the_entry(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    seen: list[State] = []
    real = rig.lc.set_state

    def spy(s, why):
        real(s, why)
        seen.append(s)

    rig.lc.set_state = spy
    entry = run(rig.lc.switch("nccl-tuned", "off", None))
    assert entry.outcome == Outcome.SWITCHED and seen == [State.SWITCHING, State.SERVING]
    assert rig.lc.current.name == "nccl-tuned" and rig.lc.status().to_json()["switches"]["outcomes"]["switched"] == 1
    assert rig.history()[-1] == entry.to_json()
    assert rig.make().status().to_json()["switches"]["outcomes"]["switched"] == 1  # kept: a restarted control API counts it
    again = run(rig.lc.switch("nccl-tuned", "off", None))
    assert again.to_json() == {"outcome": "unchanged", "error": None, "durations": {}}


def _kept(sd) -> dict:
    return json.loads(StatePaths(sd).switch_counts.read_text())


def _append(sd, outcome: str) -> None:
    """A line another process appends to history.jsonl (a control API of an earlier start, an operator)."""
    with StatePaths(sd).history.open("a") as fh:
        fh.write(json.dumps({"outcome": outcome, "durations": {"total_s": 2.0}}) + "\n")


def test_a_start_keeps_the_switch_counts_it_read_at_once_and_a_replaced_history_never_lowers_them(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    run(rig.lc.switch("nccl-tuned", "off", None))
    hist = StatePaths(tmp_path).history
    assert _kept(tmp_path)["history_bytes"] == hist.stat().st_size
    _append(tmp_path, "failed")  # while the control API is down
    lc = rig.make()  # the start counts it and keeps it at once, before any switch
    kept = _kept(tmp_path)
    assert kept["history_bytes"] == hist.stat().st_size
    assert (kept["totals"]["switched"], kept["totals"]["failed"]) == (1, 1)
    assert lc.status().to_json()["switches"]["outcomes"]["failed"] == 1
    # Replaced by a shorter history (rotated by hand) before the next switch: what was counted is kept (a counter
    # never goes down), the new file's lines are new and counted once: a second start does not count them again.
    hist.write_text(json.dumps({"outcome": "rolled_back", "durations": {"total_s": 3.0}}) + "\n")
    for _ in range(2):
        outcomes = rig.make().status().to_json()["switches"]["outcomes"]
        assert (outcomes["switched"], outcomes["failed"], outcomes["rolled_back"]) == (1, 1, 1)
        assert _kept(tmp_path)["history_bytes"] == hist.stat().st_size


def test_a_switch_counts_what_the_history_gained_from_the_file_itself(tmp_path):
    """A line another process appended while this one runs is counted with this process's next entry, and
    kept (never marked covered but uncounted)."""
    rig = Rig(tmp_path)
    run(rig.tick())
    _append(tmp_path, "aborted")
    run(rig.lc.switch("nccl-tuned", "off", None))
    outcomes = rig.lc.status().to_json()["switches"]["outcomes"]
    assert (outcomes["switched"], outcomes["aborted"]) == (1, 1)
    assert _kept(tmp_path)["history_bytes"] == StatePaths(tmp_path).history.stat().st_size
    assert rig.make().status().to_json()["switches"]["outcomes"] == outcomes


def test_a_history_read_on_retry_is_kept_at_once(tmp_path):
    rig = Rig(tmp_path)
    paths = StatePaths(tmp_path)
    os.mkfifo(paths.history)  # unreadable at start: unknown, nothing kept
    lc = rig.make()
    assert lc.switch_counts_now() is None and not paths.switch_counts.exists()
    paths.history.unlink()
    _append(tmp_path, "failed")
    lc.reads.counts_tried -= history_reads.RETRY_BASELINE_S  # the retry is due
    assert lc.switch_counts_now().totals["failed"] == 1
    assert _kept(tmp_path)["history_bytes"] == paths.history.stat().st_size
    assert _kept(tmp_path)["totals"]["failed"] == 1


def test_a_failed_switch_rolls_back_and_says_why(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    sw = rig.lc.switcher
    rig.server.health = lambda: 200 if sw.active is None or sw.active.name == "baseline" else 503
    entry = run(rig.lc.switch("nccl-tuned", "off", 0.05))
    assert entry.outcome == Outcome.ROLLED_BACK and rig.lc.state == State.ROLLED_BACK
    assert rig.lc.current.name == "baseline" and rig.lc.last_error.startswith("health timeout")


def test_an_aborted_switch_leaves_the_state_it_found(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    rig.sup.crash()
    run(rig.tick())
    assert rig.lc.state == State.DOWN
    rig.sup.respawn()
    rig.sup.run()
    rig.server.metrics = 2  # requests keep running
    entry = run(rig.lc.switch("nccl-tuned", "off", None))
    assert entry.outcome == Outcome.ABORTED and rig.lc.state == State.DOWN and rig.sup.stops == 0


def test_a_journal_that_cannot_be_written_changes_nothing(tmp_path, monkeypatch):
    rig = Rig(tmp_path)
    run(rig.tick())

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "begin", full)
    with pytest.raises(RuntimeFailure, match="nothing was changed"):
        run(rig.lc.switch("nccl-tuned", "off", None))
    assert rig.lc.state == State.SERVING and rig.sup.stops == 0


def test_a_second_switch_while_one_runs_is_busy(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())

    async def both():
        await rig.lc.lock.acquire()
        try:
            await rig.lc.switch("nccl-tuned", "off", None)
        finally:
            rig.lc.lock.release()

    with pytest.raises(Busy):
        run(both())


# ----- a switch cut short, at each journal phase ------------------------------------------------------------
FROM, TO = "baseline", "nccl-tuned"


def cut_short(rig: Rig, phase, target_healthy: bool, program: str) -> journal.Journal:
    """A switch baseline -> nccl-tuned whose control API died at `phase`: the journal, the rendered
    target (from `starting` on), and supervisord's program as the crash left it."""
    old, new = plan(FROM), plan(TO)
    j = journal.begin(rig.sd, switch_mod.label(old), switch_mod.label(new))
    if phase == "done":
        journal.finished(rig.sd, j, Outcome.SWITCHED)
    elif phase == "old-done":  # the string form journals once had
        data = json.loads(StatePaths(rig.sd).journal.read_text())
        StatePaths(rig.sd).journal.write_text(json.dumps({**data, "phase": "done:rolled_back"}))
    elif phase != Phase.DRAINING:
        journal.advance(rig.sd, j, phase)
    rendered = new if phase not in (Phase.DRAINING, Phase.STOPPING) else old
    write_plan(rig.sd, rendered)
    if program == "stopped":
        rig.sup.stop()
    rig.server.health = (lambda: 200) if target_healthy else (
        lambda: 200 if rig.lc.switcher.active is not None and rig.lc.switcher.active.name == FROM else 503)
    if not target_healthy and rendered.name == FROM:
        rig.server.health = 503
    rig.lc = rig.make()
    return j


PHASES = [Phase.DRAINING, Phase.STOPPING, Phase.STARTING, Phase.HEALTH, Phase.ACTIVATION, Phase.ROLLING_BACK,
          "done", "old-done"]


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("program", ["running", "stopped"])
def test_a_healthy_plan_left_by_a_cut_short_switch_is_kept(tmp_path, phase, program):
    rig = Rig(tmp_path)
    j = cut_short(rig, phase, True, program)

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    entry = run(go())
    expected_phase = {"done": "done:switched", "old-done": "done:rolled_back"}.get(phase, str(phase))
    rendered = FROM if phase in (Phase.DRAINING, Phase.STOPPING) else TO
    assert (entry.outcome, entry.resolution, entry.interrupted_phase) == (Outcome.INTERRUPTED, "kept", expected_phase)
    assert entry.id == j.id and entry.running.profile == rendered
    assert rig.lc.state == State.SERVING and rig.lc.current.name == rendered and not rig.lc.lock.locked()
    assert rig.sup.calls.count("start") == (1 if program == "stopped" else 0)
    assert journal.read(rig.sd) is None and rig.history()[-1]["id"] == j.id
    if phase in ("done", "old-done"):
        assert entry.finished_as == expected_phase[5:] and "could not be recorded" in entry.error
    assert json.loads(StatePaths(tmp_path).committed.read_text())["plan"]["name"] == rendered


@pytest.mark.parametrize("phase", [Phase.STARTING, Phase.HEALTH, Phase.ACTIVATION, "done"])
def test_an_unhealthy_target_left_by_a_cut_short_switch_is_rolled_back(tmp_path, phase):
    rig = Rig(tmp_path)
    cut_short(rig, phase, False, "running")

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    entry = run(go())
    assert (entry.outcome, entry.resolution) == (Outcome.INTERRUPTED, "rolled_back")
    assert entry.gate_error.startswith("health timeout") and "rollback_s" in entry.durations
    assert rig.lc.state == State.ROLLED_BACK and rig.lc.current.name == FROM
    line = rig.history()[-1]
    assert "rollback_s" not in line and line["running"]["profile"] == FROM


def test_an_unhealthy_plan_with_nothing_to_go_back_to_fails(tmp_path):
    rig = Rig(tmp_path)
    cut_short(rig, Phase.DRAINING, False, "running")  # rendered = the committed plan, and it does not answer

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    entry = run(go())
    assert entry.resolution == "failed" and rig.lc.state == State.FAILED and "rollback_s" not in entry.durations


def test_a_damaged_journal_is_resolved_as_unknown(tmp_path):
    rig = Rig(tmp_path)
    StatePaths(tmp_path).journal.write_text("{")
    rig.lc = rig.make()

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    entry = run(go())
    assert entry.interrupted_phase == "unknown" and entry.resolution == "kept"


def test_recovery_sees_a_target_that_dies_between_polls_as_dead(tmp_path):
    rig = Rig(tmp_path)
    cut_short(rig, Phase.HEALTH, False, "running")
    polls = {"n": 0}

    def flap(s: FakeSupervisor) -> None:
        polls["n"] += 1
        if polls["n"] == 3:
            s.on_info = None
            s.crash()
            s.respawn(0)

    rig.sup.on_info = flap

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    entry = run(go())
    assert entry.resolution == "rolled_back" and "exited" in entry.gate_error


def test_supervisord_gone_mid_switch_leaves_failed_and_the_next_start_names_why(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    sw = rig.lc.switcher

    def gone(_sup):
        if sw.phase == Phase.HEALTH or rig.lc.state != State.SWITCHING and rig.lc.lock.locked():
            raise switch_mod.SupervisorGone("supervisord stopped answering on x.sock (connection refused)")

    rig.sup.on_info = gone
    entry = run(rig.lc.switch("nccl-tuned", "off", None))
    assert entry.outcome == Outcome.INTERRUPTED and rig.lc.state == State.FAILED
    assert rig.lc.last_error == entry.error and "supervisord stopped answering" in entry.error
    assert rig.history() == []
    rig.sup.on_info = None  # a new serve: supervisord answers again
    rig.lc = rig.make()

    async def go():
        await rig.lc.lock.acquire()
        return await rig.lc.recover(journal.read(rig.sd))

    recovered = run(go())
    [line] = rig.history()
    assert line["id"] == entry.id and line["outcome"] == "interrupted" and line["resolution"] == "kept"
    assert line["error"] == ("the switch was cut short in phase 'health' "
                             "(supervisord stopped answering on x.sock (connection refused))") == recovered.error


def test_a_switch_is_refused_while_history_is_a_link_and_nothing_changes(tmp_path):
    rig = Rig(tmp_path)
    run(rig.tick())
    victim = tmp_path / "passwd-copy"
    victim.write_text("root:x:0:0\n")
    StatePaths(tmp_path).history.symlink_to(victim)
    with pytest.raises(RuntimeFailure, match="history.jsonl is a symbolic link.*nothing was changed"):
        run(rig.lc.switch("nccl-tuned", "off", None))
    assert rig.lc.state == State.SERVING and rig.sup.stops == 0 and victim.read_text() == "root:x:0:0\n"
    assert journal.read(tmp_path) is None
