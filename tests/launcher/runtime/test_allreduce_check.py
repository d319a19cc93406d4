"""launcher/runtime/allreduce_check.py and server_exec's start: which profiles get the exact all-reduce check,
what happens without GPUs, and (gloo on 2 CPU ranks standing in for the GPUs) that a wrong sum stops a start
and a right one lets it go on. The GPU backends themselves need GPUs: not run here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers_profiles import ENV, SITECUSTOMIZE_DIR, clean_env

from launcher.profiles.plan import build_plan
from launcher.profiles.render import write_plan
from launcher.runtime import allreduce_check as check
from launcher.runtime.start_lines import NEEDLES, scan

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def _plan(name: str, **env: str):
    """The plan of `name` (spec off) built with `env` set on top of the test's environment."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return build_plan(name, spec="off")
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _gpus(n: int):
    calls: list[int] = []

    def count() -> tuple[int, str]:
        calls.append(n)
        return n, f"test: {n} GPUs"

    return count, calls


# ----- the decision -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("profile", "backends"), [
    ("baseline", None),
    ("nccl-tuned", ("nccl",)),
    ("custom-ar", ("pcie-ipc", "nccl")),
    ("fused", ("fused-ar", "nccl")),
    ("mscclpp", ("mscclpp", "nccl")),
    ("symm-mem", ("symm-mem",)),
])
def test_which_profiles_change_the_reduction_and_what_is_checked(profile, backends):
    count, _ = _gpus(8)
    decision = check.decide(_plan(profile), enabled=True, count_gpus=count)
    if backends is None:
        assert decision is None  # stock NCCL: nothing checked, nothing said
        return
    assert decision.run and decision.backends == backends and decision.nranks == 8
    assert decision.graph  # base.toml keeps CUDA graphs on: the check replays a captured graph too
    assert decision.dtype == "bf16" and f"profile {profile} puts {backends[0]}" in decision.why


def test_graphs_off_in_the_plan_means_eager_only(tmp_path, monkeypatch):
    from helpers_profiles import profile_toml, write_profiles

    write_profiles(tmp_path, {"eager-ipc.toml": profile_toml(extends="custom-ar", server={"disable-cuda-graph": True})})
    monkeypatch.setenv("KIT_PROFILES_DIR", str(tmp_path))
    decision = check.decide(_plan("eager-ipc"), enabled=True, count_gpus=_gpus(8)[0])
    assert decision.run and not decision.graph


def test_without_gpus_it_says_why_and_does_not_run():
    plan = _plan("custom-ar")
    for gpus, words in ((0, "not run: no GPUs to reduce across (test: 0 GPUs)"),
                        (1, "not run: no GPUs to reduce across (test: 1 GPUs)"),
                        (4, "not run: 4 GPUs visible (test: 4 GPUs), fewer than the plan's --tp-size 8")):
        decision = check.decide(plan, enabled=True, count_gpus=_gpus(gpus)[0])
        assert not decision.run and decision.why.startswith(words)
        assert "pcie-ipc (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1)" in decision.why
    decision = check.decide(_plan("custom-ar", KIT_TP_SIZE="2"), enabled=True, count_gpus=_gpus(2)[0])
    assert decision.run and decision.nranks == 2


def test_turned_off_it_does_not_even_count_gpus():
    count, calls = _gpus(8)
    decision = check.decide(_plan("fused"), enabled=False, count_gpus=count)
    assert not decision.run and decision.why.startswith("not run: KIT_ALLREDUCE_START_CHECK=0 turns it off")
    assert calls == []


def test_the_setting_is_read_in_before_start(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_ALLREDUCE_START_CHECK", "0")
    out = check.before_start(_plan("custom-ar"), tmp_path, run=lambda *a: pytest.fail("ran"),
                             count_gpus=lambda: pytest.fail("counted"))
    assert out.stop is None and out.lines[0].startswith("all-reduce check not run: KIT_ALLREDUCE_START_CHECK=0")
    assert check.before_start(_plan("baseline"), tmp_path, run=lambda *a: pytest.fail("ran")).lines == []


def test_no_device_node_is_zero_gpus_without_importing_torch(tmp_path):
    assert check.visible_gpus((str(tmp_path / "nvidia[0-9]*"),)) == (
        0, f"no GPU device node here ({tmp_path / 'nvidia[0-9]*'})")


def test_the_hidden_size_comes_from_the_model(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 4096}}))
    monkeypatch.setenv("MODEL_PATH", str(tmp_path))
    assert check.model_hidden(build_plan("custom-ar", spec="off"))[0] == 4096
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "absent"))
    assert check.model_hidden(build_plan("custom-ar", spec="off"))[0] == check.DEFAULT_HIDDEN


def test_the_command_is_the_exact_check_alone_in_the_plans_environment(tmp_path):
    decision = check.Decision(True, "x", ("pcie-ipc", "nccl"), 8, True)
    cmd = check.command(decision, tmp_path / "profile.json", tmp_path / "out", 4096)
    assert cmd[1:5] == ["-m", "bench", "allreduce", "--exact-only"]
    args = dict(zip(cmd[5::2], cmd[6::2], strict=False))
    assert args["--plan"] == str(tmp_path / "profile.json") and args["--backends"] == "pcie-ipc,nccl"
    assert args["--nranks"] == "8" and args["--hidden"] == "4096" and cmd[-1] == "--graph"


def test_a_librarys_words_never_pass_for_the_servers_own_lines():
    said = "not run: backend skipped: SGLang's MSCCL++ communicator disabled itself: PyMscclpp is disabled because x"
    quiet = check.quiet(said)
    assert quiet.startswith("not run: backend skipped: SGLang's MSCCL++ communicator disabled itself ...")
    assert not any(n in quiet for n in NEEDLES)
    assert check.quiet("PASS: fine") == "PASS: fine"


# ----- run_check with a stand-in for the bench ---------------------------------------------------------


def _fake_bench(rows: list[dict] | None, rc: int):
    seen: list[list[str]] = []

    def run(cmd: list[str], out) -> int:
        seen.append(cmd)
        out.write("bench output\n")
        if rows is not None:
            target = Path(cmd[cmd.index("--out") + 1]) / "allreduce.json"
            target.write_text(json.dumps(rows))
        return rc

    return run, seen


DECISION = check.Decision(True, "checking pcie-ipc, nccl exactly on 2 GPUs", ("pcie-ipc", "nccl"), 2, True)
FAIL_TEXT = ("FAIL: pcie-ipc at 14336 B (1 x 7168), graph replay 2/3, rank 1: element 3584 = -1, expected 19 "
             "(the exact sum over 2 ranks)")


def test_a_fail_stops_the_start_naming_backend_and_element(tmp_path):
    rows = [{"backend": "pcie-ipc", "exact": FAIL_TEXT}, {"backend": "nccl", "exact": "PASS: every element exact"}]
    run, seen = _fake_bench(rows, 1)
    out = check.run_check(DECISION, tmp_path / "profile.json", tmp_path / "check", (7168, "hidden 7168"), run)
    assert out.stop == 1 and len(seen) == 1
    assert f"all-reduce check pcie-ipc: {FAIL_TEXT}" in out.lines and "all-reduce check nccl: PASS: every" in out.lines[2]
    assert out.lines[-1].startswith(f"all-reduce check FAIL: {FAIL_TEXT.removeprefix('FAIL: ')}; SGLang is not "
                                    "started (exit 1): this profile's pcie-ipc all-reduce failed its exact check")
    assert (tmp_path / "check" / "check.log").read_text() == "bench output\n"


def test_a_pass_or_a_backend_that_cannot_run_lets_the_start_go_on(tmp_path):
    rows = [{"backend": "pcie-ipc", "exact": "not run: backend skipped: python package 'flashinfer' is not installed"},
            {"backend": "nccl", "exact": "PASS: every element exact"}]
    out = check.run_check(DECISION, tmp_path / "p.json", tmp_path / "check", (7168, "h"), _fake_bench(rows, 0)[0])
    assert out.stop is None and "all-reduce check pcie-ipc: not run: backend skipped" in out.lines[1]


def test_a_check_that_broke_is_said_and_never_read_from_an_old_file(tmp_path):
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "allreduce.json").write_text(json.dumps([{"backend": "nccl", "exact": FAIL_TEXT}]))
    out = check.run_check(DECISION, tmp_path / "p.json", tmp_path / "check", (7168, "h"), _fake_bench(None, 2)[0])
    assert out.stop is None
    assert out.lines[-1].startswith("all-reduce check not run: `bench allreduce` exited 2 without a verdict")


def test_a_stop_during_the_check_never_starts_the_server_and_a_killed_check_alone_does_not_stop_it(tmp_path):
    args = (DECISION, tmp_path / "p.json", tmp_path / "check", (7168, "h"), _fake_bench(None, 143)[0])
    out = check.run_check(*args, stopped=lambda: 143)
    assert out.stop == 143 and "SGLang is not started" in out.lines[-1]
    out = check.run_check(*args)  # killed by something else (the OOM killer): reported, and the server starts
    assert out.stop is None and "exited 143 without a verdict" in out.lines[-1]


def test_the_check_log_is_never_written_through_a_link(tmp_path):
    """check.log lies in the state dir: a link planted there (to /etc/passwd, as root) must not be truncated."""
    victim = tmp_path / "passwd-copy"
    victim.write_text("root:x:0:0\n")
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "check.log").symlink_to(victim)
    rows = [{"backend": "nccl", "exact": "PASS: every element exact"}]
    out = check.run_check(DECISION, tmp_path / "p.json", tmp_path / "check", (7168, "h"), _fake_bench(rows, 0)[0])
    assert out.stop is None and victim.read_text() == "root:x:0:0\n"
    log = tmp_path / "check" / "check.log"
    assert not log.is_symlink() and log.read_text() == "bench output\n" and oct(log.stat().st_mode & 0o777) == "0o600"


# ----- server_exec, for real, with gloo on 2 CPU ranks standing in for the GPUs ---------------------------

# server_exec as supervisord runs it, with the decision's backend forced to gloo (2 ranks): the CUDA backends
# cannot run here, and the rest (bench subprocess, verdict, exit status, the log lines) is the real path.
DRIVER = """
import sys
from launcher.runtime import allreduce_check
from launcher.runtime.process import server_exec
real = allreduce_check.decide
def forced(plan, *, enabled, count_gpus):
    d = real(plan, enabled=enabled, count_gpus=lambda: (2, "test: 2 CPU ranks stand in for GPUs"))
    if d is None or not d.run:
        return d
    return allreduce_check.Decision(True, d.why + "; test: gloo stands in", ("gloo",), 2, False, "bf16")
allreduce_check.decide = forced
if len(sys.argv) > 3:  # a check that only sleeps, to be stopped
    allreduce_check.command = lambda *a: [sys.executable, "-c", "import time; time.sleep(60)"]
sys.exit(server_exec.main(sys.argv[1:3]))
"""
SERVER = "import sys; print('SERVER STARTED', flush=True)"


def _state(tmp_path: Path, profile: str) -> tuple[Path, dict[str, str]]:
    """A state dir with `profile` rendered (TP 2, the 'server' a one-line python) and server_exec's environment."""
    state = tmp_path / "state"
    env = {**ENV, "KIT_TP_SIZE": "2", "KIT_SERVER_CMD": f"{sys.executable} -c \"{SERVER}\""}
    write_plan(state, _plan(profile, **env))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "PYTHONPATH"))}
    return state, {**base, "PYTHONPATH": f"{SITECUSTOMIZE_DIR}{os.pathsep}{REPO}",
                   "KIT_PROFILE_ENV": str(state / "profile.env"), "KIT_STOP_WAIT_S": "10", "PYTHONUNBUFFERED": "1"}


def _server_exec(state: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, "--state-dir", str(state), *extra], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.stack
def test_a_wrong_sum_stops_the_start_and_a_right_one_starts_the_server(tmp_path):
    state, env = _state(tmp_path, "custom-ar")
    proc = _server_exec(state, {**env, "KIT_ALLREDUCE_TEST_CORRUPT_RANK": "1"})
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, log
    assert "SERVER STARTED" not in log.splitlines()
    fail = next(ln for ln in log.splitlines() if ln.startswith("server_exec: all-reduce check FAIL: "))
    assert "gloo at 14336 B (1 x 7168), eager call 2/3, rank 1: element 3584 = -1, expected" in fail
    assert "SGLang is not started (exit 1)" in fail
    (record,) = scan(log)  # the start's record: the check's lines were read as nothing of SGLang's
    assert record["profile"] == "custom-ar" and record["seen"] == {}
    assert json.loads((state / check.CHECK_DIR / "allreduce.json").read_text())[0]["profile"] == "custom-ar"

    proc = _server_exec(state, env)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, log
    assert "server_exec: all-reduce check gloo: PASS: every element exact and bit-identical on 2 ranks" in log
    lines = log.splitlines()
    assert any(ln.startswith("server_exec: all-reduce check gloo: PASS") for ln in lines[:lines.index("SERVER STARTED")])


@pytest.mark.stack
def test_without_gpus_the_start_says_so_and_goes_on(tmp_path):
    state, env = _state(tmp_path, "custom-ar")
    proc = subprocess.run([sys.executable, "-m", "launcher.runtime.process.server_exec", "--state-dir", str(state)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "all-reduce check" in ln)
    if Path("/dev/nvidia0").exists():
        pytest.skip(f"this machine has a GPU device node; the check said: {line}")
    assert line.startswith("server_exec: all-reduce check not run: no GPUs to reduce across (no GPU device node here")
    assert "SERVER STARTED" in proc.stdout.splitlines()


@pytest.mark.stack
def test_a_stop_during_the_check_ends_it_and_starts_nothing(tmp_path):
    state, env = _state(tmp_path, "custom-ar")
    proc = _server_exec(state, env, "--sleeping-check")
    log_file = state / check.CHECK_DIR / "check.log"
    deadline = time.monotonic() + 120
    while not log_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the sleeper is started
    sleepers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "time.sleep(60)" in " ".join(p.cmdline())]
    os.kill(proc.pid, signal.SIGTERM)
    log = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, log
    assert "SERVER STARTED" not in log.splitlines() and "all-reduce check stopped" in log
    assert sleepers and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in sleepers)
