"""`bench tune` end to end, when it is stopped or changed: a resume after SIGKILL measures nothing twice, a changed
profile is measured again, SIGINT puts production back, --apply switches to the written profile
(tests/helpers_tune.py: the stack and its profiles)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess

import helpers_tune
import pytest
from helpers_tune import journal, keys, on_start_plan, result, run_tune, tune_argv, tune_env

from testsupport.net import until
from testsupport.stack import REPO, stop_group

pytestmark = pytest.mark.stack  # every test here starts a process

# The shared stack and the autouse reset: pytest looks fixtures up by name in the test module.
stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline


def test_resume_after_sigkill_measures_nothing_twice(stack, tmp_path):
    argv = tune_argv(stack, tmp_path, "--profiles", "baseline,fast,same")
    proc = subprocess.Popen(argv, cwd=REPO, env=tune_env(stack), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # killed while one of its switches holds the server: the resumed tune must wait for it, not fail
        until(lambda: (tmp_path / "journal.jsonl").exists() and len(journal(tmp_path)) >= 5
              and stack.status()["state"] == "switching", timeout=120,
              what="five finished cells in the journal and a switch running")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    first = journal(tmp_path)
    state = json.loads((tmp_path / "tune-state.json").read_text())
    assert state["start_plan"]["name"] == "baseline"
    again = run_tune(stack, tmp_path, "--profiles", "baseline,fast,same")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(first)} finished cell(s) reused" in again.stderr
    lines = journal(tmp_path)
    assert lines[: len(first)] == first  # kept as written
    counts = collections.Counter(keys(lines))
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert result(tmp_path)["winner"]["label"] == "fast+off"
    on_start_plan(stack)  # where it started, not where the kill left it


def test_a_changed_profile_is_measured_again(stack, tmp_path):
    args = ("--profiles", "baseline,same", "--final-repeats", "1")
    assert run_tune(stack, tmp_path, *args).returncode == 0
    first = journal(tmp_path)
    path = stack.profiles_dir / "same.toml"
    original = path.read_text()
    try:
        path.write_text(original + "# edited\n")
        again = run_tune(stack, tmp_path, *args)
    finally:
        path.write_text(original)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "same+off: measured again (profile same's file changed since it was measured)" in again.stderr
    new = journal(tmp_path)[len(first):]
    assert {e["label"] for e in new} == {"same+off"}  # baseline's cells were reused
    assert {(e["phase"], e["round"]) for e in new} == {(e["phase"], e["round"]) for e in first
                                                        if e["label"] == "same+off"}
    on_start_plan(stack)


def test_sigint_puts_production_back_and_leaves_partial_results(stack, tmp_path):
    proc = subprocess.Popen(tune_argv(stack, tmp_path, "--profiles", "baseline,fast,same"), cwd=REPO,
                            env=tune_env(stack), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: (tmp_path / "journal.jsonl").exists() and len(journal(tmp_path)) >= 3, timeout=120,
              what="three finished cells in the journal")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        stop_group(proc, 5) if proc.poll() is None else None
    assert proc.returncode == 130, err[-3000:]
    assert "production back on baseline+off" in err + out, err[-2500:]
    res = result(tmp_path)
    assert res["complete"] is False and res["interrupted"] is True and res["winner"] is None
    on_start_plan(stack)


def test_apply_switches_to_the_written_profile(stack, tmp_path):
    proc = run_tune(stack, tmp_path, "--profiles", "baseline,fast", "--apply", "--profile-dir",
                    str(stack.profiles_dir), "--profile-name", "tuned-apply")
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        st = stack.wait_state({"serving"})
        assert (st["profile"], st["spec"]) == ("tuned-apply", "off")
        assert "applied: production runs profile tuned-apply" in proc.stderr + proc.stdout
        assert stack.debug_env()["env"].get("KIT_ACTIVE_PROFILE") == "tuned-apply"
    finally:
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")
        (stack.profiles_dir / "tuned-apply.toml").unlink(missing_ok=True)


def test_a_finished_tune_is_no_resume_and_a_kill_before_the_restore_is_put_back(stack, tmp_path):
    """A tune that ended is marked finished: the same command again decides from its journal against the plan
    that runs now, never reporting a plan as staying that does not run. A tune killed after it wrote its
    results but before production went back (the state file not yet marked) is resumed by the same command,
    which puts production back on the plan the first run started from. --fresh keeps the old journal aside."""
    args = ("--profiles", "baseline,fast", "--final-repeats", "1")  # fast: another digest than baseline
    first = run_tune(stack, tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    state_file = tmp_path / "tune-state.json"
    state = json.loads(state_file.read_text())
    assert state["finished"] is True and state["result"]
    assert stack.switch("fast", "off").json()["outcome"] == "switched"  # production moved on since
    again = run_tune(stack, tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "found a finished tune" in again.stderr and "against the plan that runs now, fast+off" in again.stderr
    assert "baseline+off stays" not in again.stderr + again.stdout
    assert result(tmp_path)["incumbent"]["label"] == "fast+off", result(tmp_path)["incumbent"]
    st = stack.wait_state({"serving"})
    assert st["profile"] == "fast"  # where this run started
    # the kill window: results written, production still on a measured cell, the state not marked finished
    state_file.write_text(json.dumps({k: v for k, v in state.items() if k not in ("finished", "result")}))
    resumed = run_tune(stack, tmp_path, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming: production was left on fast+off" in resumed.stderr, resumed.stderr
    assert "production back on baseline+off" in resumed.stderr + resumed.stdout
    on_start_plan(stack)
    fresh = run_tune(stack, tmp_path, *args, "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "--fresh: " in fresh.stderr and list(tmp_path.glob("journal.*.jsonl"))
    assert "resuming" not in fresh.stderr and "found a finished tune" not in fresh.stderr  # measured afresh
    on_start_plan(stack)


def test_apply_never_runs_an_older_file_under_the_profile_name(stack, tmp_path):
    """The server reads an older `tuned-stale.toml` (a broken reduction) under the name the tune writes its
    winner as: --apply checks the digest, refuses that plan, and runs the winner itself."""
    stale = stack.profiles_dir / "tuned-stale.toml"
    stale.write_text(helpers_tune._profile("tuned-stale", '[env]\nSTANDIN_NUMERICS = "corrupt"\n'))
    try:
        proc = run_tune(stack, tmp_path, "--profiles", "baseline,fast", "--apply", "--profile-name", "tuned-stale")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "the server's profile tuned-stale is not the plan the tune chose" in proc.stderr, proc.stderr[-3000:]
        assert "applied: production runs fast+off\n" in proc.stderr + proc.stdout
        st = stack.wait_state({"serving"})
        ran = [e["plan_digest"] for e in journal(tmp_path) if e["label"] == "fast+off" and e["status"] == "ok"]
        assert (st["profile"], st["spec"]) == ("fast", "off") and st["digest"] == ran[-1]
    finally:
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")
        stale.unlink(missing_ok=True)
