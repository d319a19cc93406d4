"""Integration: real supervisord + control API + stand-in server, every fault the switch must survive."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from testsupport.net import until

pytestmark = pytest.mark.stack  # every test here starts a process

LOADED_START_S = 120  # a loaded host can take more than the stack's 30 s to start; the start is not under test here


def test_switch_a_to_b_reaches_new_env_and_argv(kit_stack):
    stack = kit_stack("baseline", "off")
    before = stack.debug_env()
    assert before["env"]["KIT_ACTIVE_PROFILE"] == "baseline"
    assert "NCCL_PROTO" not in before["env"]
    r = stack.switch("nccl-tuned", "eagle3")
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "switched"
    after = stack.debug_env()
    assert after["pid"] != before["pid"]
    assert after["env"]["KIT_ACTIVE_PROFILE"] == "nccl-tuned"
    assert after["env"]["NCCL_PROTO"] == "LL" and after["env"]["NCCL_MAX_NCHANNELS"] == "4"
    assert "KIT_CONTROL_TOKEN" not in after["env"]
    argv = after["argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    st = stack.status()
    assert (st["profile"], st["spec"], st["state"]) == ("nccl-tuned", "eagle3", "serving")
    hist = stack.history()
    assert hist[-1]["outcome"] == "switched"
    assert hist[-1]["from"]["profile"] == "baseline" and hist[-1]["to"]["profile"] == "nccl-tuned"
    assert set(hist[-1]["durations"]) >= {"drain_s", "stop_s", "start_s", "health_s", "total_s"}
    committed = json.loads((stack.state_dir / "committed.json").read_text())
    assert committed["plan"]["name"] == "nccl-tuned"


def test_an_identical_profile_under_another_name_is_a_real_switch(kit_stack):
    """Same env, flags and patches (one digest), another name: the server starts under the new name,
    and /status names it; only the same name, spec and digest is "unchanged"."""
    stack = kit_stack("baseline", "off", start=False)
    (stack.profiles_dir / "twin.toml").write_text('description = "test: baseline twin"\nextends = "baseline"\n')
    stack.start()
    before = stack.status()
    r = stack.switch("twin", "off")
    assert r.json()["outcome"] == "switched", r.text
    st = stack.status()
    assert (st["profile"], st["digest"]) == ("twin", before["digest"])
    assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "twin"
    assert stack.switch("twin", "off").json()["outcome"] == "unchanged"
    assert stack.switch("baseline", "off").json()["outcome"] == "switched"
    assert stack.status()["profile"] == "baseline"


def test_a_server_that_loads_then_answers_503_then_a_slow_health_serves_and_switches(kit_stack):
    """SGLang 0.5.23's start: the port refuses through the model load, /health answers 503 during warm-up,
    then each /health is a one-token generation (here 2.5 s, past the monitor's old 2 s probe timeout). The
    first start commits, /status reads health ok, and a switch health-gates and commits the same way."""
    env = {"STANDIN_LOAD_DELAY_S": "2", "STANDIN_STARTUP_DELAY_S": "1", "STANDIN_HEALTH_DELAY_S": "2.5"}
    stack = kit_stack("baseline", "off", extra_env=env, start=False).start(timeout=LOADED_START_S)
    st = until(lambda: (s := stack.status())["health"] == "ok" and s["state"] == "serving" and s, 60, "serving")
    assert st["profile"] == "baseline" and st["last_error"] is None
    r = stack.switch("nccl-tuned", "off")
    assert r.status_code == 200 and r.json()["outcome"] == "switched", r.text
    st = until(lambda: (s := stack.status())["health"] == "ok" and s, 60, "health ok after the switch")
    assert (st["profile"], st["state"]) == ("nccl-tuned", "serving")


def test_a_probe_timeout_below_the_health_generation_never_commits(kit_stack):
    """Why KIT_HEALTH_PROBE_TIMEOUT_S waits past SGLang's /health: with 1 s against a 2.5 s /health every probe
    reads 'timeout' (not down), and the first start is never committed as serving."""
    env = {"STANDIN_HEALTH_DELAY_S": "2.5", "KIT_HEALTH_PROBE_TIMEOUT_S": "1"}
    stack = kit_stack("baseline", "off", extra_env=env, start=False)
    stack.start(timeout=LOADED_START_S, states=frozenset({"starting"}), healthy=False)
    st = until(lambda: (s := stack.status())["health"] == "timeout" and s, 60, "a probe timed out")
    assert st["state"] == "starting"


def test_crash_at_start_rolls_back(kit_stack):
    stack = kit_stack("baseline", "off", start=False).start(timeout=LOADED_START_S)
    r = stack.switch("crashy", "off")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "rolled_back"
    assert "exited" in body["error"]
    assert any("crash" in line.lower() for line in body["log_tail"])
    st = stack.wait_state({"rolled_back"}, 20)
    assert st["profile"] == "baseline" and "exited" in st["last_error"]
    assert httpx.get(f"{stack.server_url}/health_generate", timeout=5).status_code == 200
    assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "baseline"
    assert stack.history()[-1]["outcome"] == "rolled_back"
    # The CLI reports it as a failure with the reason.
    cli = stack.cli("switch", "crashy", "--spec", "off")
    assert cli.returncode == 1 and "rolled_back" in cli.stdout and "reason" in cli.stdout


def test_hang_at_start_times_out_then_rolls_back(kit_stack):
    stack = kit_stack("baseline", "off")
    t0 = time.monotonic()
    r = stack.switch("hangs", "off", timeout_s=2)
    elapsed = time.monotonic() - t0
    body = r.json()
    assert body["outcome"] == "rolled_back", body
    assert "health timeout" in body["error"]
    assert elapsed >= 2
    assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "baseline"


def test_concurrent_switch_gets_409(kit_stack):
    stack = kit_stack("baseline", "off")
    results: list[int] = []
    slow = threading.Thread(target=lambda: results.append(stack.switch("hangs", "off", timeout_s=3).status_code))
    slow.start()
    deadline = time.monotonic() + 10
    while stack.status()["state"] != "switching" and time.monotonic() < deadline:
        time.sleep(0.05)
    second = stack.switch("nccl-tuned", "off")
    slow.join()
    assert second.status_code == 409
    assert results == [200]


def test_auth_required_and_nothing_changes(kit_stack):
    stack = kit_stack("baseline", "off")
    pid = stack.debug_env()["pid"]
    assert stack.switch("nccl-tuned", token=None).status_code == 401
    assert stack.switch("nccl-tuned", token="wrong").status_code == 401
    cli = stack.cli("switch", "nccl-tuned", env={"KIT_CONTROL_TOKEN": "wrong"})
    assert cli.returncode == 2 and "token" in cli.stderr
    assert stack.debug_env()["pid"] == pid
    assert stack.status()["profile"] == "baseline"


def test_no_token_configured_refuses_state_changes(kit_stack):
    stack = kit_stack("baseline", "off", extra_env={"KIT_CONTROL_TOKEN": ""})
    r = stack.switch("nccl-tuned", token="anything")
    assert r.status_code == 403 and "KIT_CONTROL_TOKEN" in r.json()["error"]
    assert stack.status()["profile"] == "baseline"


def test_invalid_profile_400_and_nothing_changes(kit_stack, tmp_path):
    stack = kit_stack("baseline", "off")
    pid = stack.debug_env()["pid"]
    (stack.profiles_dir / "bad.toml").write_text(
        'description = "bad"\nstatus = "experimental"\n[env]\nNCCL_ALGO = "Tree"\n'
    )
    r = stack.switch("nope")
    assert r.status_code == 400 and "unknown profile" in r.json()["error"]
    r = stack.switch("bad")
    assert r.status_code == 400 and "Tree" in r.json()["error"]
    r = stack.switch("baseline", spec="warp")
    assert r.status_code == 400 and "spec" in r.json()["error"]
    assert stack.debug_env()["pid"] == pid
    assert stack.status()["state"] == "serving"
    assert [h["outcome"] for h in stack.history()] == ["started"]
    cli = stack.cli("switch", "nope")
    assert cli.returncode == 2 and "known profiles" in cli.stderr and "Traceback" not in cli.stderr


def test_server_death_is_restarted_and_counted(kit_stack):
    stack = kit_stack("baseline", "off")
    pid = stack.debug_env()["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st = stack.status()
        if st["restarts"] >= 1 and st["health"] == "ok":
            break
        time.sleep(0.1)
    assert st["restarts"] == 1, st
    assert stack.debug_env()["pid"] != pid


def test_sigterm_leaves_no_children(kit_stack):
    stack = kit_stack("baseline", "off")
    root = psutil.Process(stack.proc.pid)
    children = root.children(recursive=True)
    assert len(children) >= 3  # sglang program, control API, log tail
    os.kill(stack.proc.pid, signal.SIGTERM)
    stack.proc.wait(timeout=60)  # ceilings, not the claim: a loaded host stops slowly
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [] and stack.proc.returncode is not None


def test_restart_resumes_committed_profile(kit_stack):
    stack = kit_stack("baseline", "off")
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    stack.stop()
    stack.start()  # same PROFILE/SPEC in the environment: a container restart
    assert stack.status()["profile"] == "nccl-tuned"
    stack.stop()
    stack.env["PROFILE"] = "fused"  # a new `make up PROFILE=...` wins over the committed one
    stack.start()
    assert stack.status()["profile"] == "fused"


def test_status_cli(kit_stack):
    stack = kit_stack("baseline", "off")
    out = stack.cli("status", "--json")
    assert out.returncode == 0
    st = json.loads(out.stdout)
    assert {"profile", "spec", "state", "since", "health", "restarts", "history"} <= set(st)
    assert st["history"][0]["outcome"] == "started"
    assert st["patch_check"] == "skip"  # the stack sets KIT_PATCH_CHECK=skip: shown, never silent
    text = stack.cli("status")
    assert text.returncode == 0 and "patch check: skip (KIT_PATCH_CHECK)" in text.stdout


def test_patch_check_is_enforced_unless_the_setting_says_skip(kit_stack):
    """fused needs the SM120 patch; the test venv's sglang carries none, so enforce refuses it at start."""
    stack = kit_stack("fused", "off", extra_env={"KIT_PATCH_CHECK": "enforce"}, start=False)
    r = stack.cli("serve", "--dry-run")
    assert r.returncode == 2 and "needs SGLang patch(es) sm120-allreduce-fusion" in r.stderr


def test_simultaneous_switches_one_wins(kit_stack):
    stack = kit_stack("baseline", "off")
    codes: list[int] = []
    barrier = threading.Barrier(2)

    def fire(profile: str) -> None:
        barrier.wait()
        codes.append(stack.switch(profile, "off").status_code)

    threads = [threading.Thread(target=fire, args=(p,)) for p in ("nccl-tuned", "fused")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200, 409]
    assert [h["outcome"] for h in stack.history()] == ["started", "switched"]


def test_a_switch_keeps_the_servers_model_overlay(kit_stack):
    """MODEL_OVERLAY is the deployment's choice: every plan the server builds, at start and at each
    switch, lays it; a switch request cannot name another."""
    stack = kit_stack("baseline", "off", extra_env={"MODEL_OVERLAY": "kimi-k2"})
    argv = stack.debug_env()["argv"]
    assert argv[argv.index("--tool-call-parser") + 1] == "kimi_k2"
    r = stack.switch("nccl-tuned", "eagle3")
    assert r.status_code == 200 and r.json()["outcome"] == "switched", r.text
    argv = stack.debug_env()["argv"]
    assert argv[-4:] == ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]
    plan = httpx.get(f"{stack.control_url}/plan", timeout=5).json()["plan"]
    assert (plan["name"], plan["model_overlay"]) == ("nccl-tuned", "kimi-k2")
    r = httpx.post(f"{stack.control_url}/switch", json={"profile": "baseline", "spec": "off", "model_overlay": ""},
                   headers={"Authorization": f"Bearer {stack.token}"}, timeout=30)
    assert r.status_code == 400 and "model_overlay" in r.json()["error"], r.text
    assert stack.status()["profile"] == "nccl-tuned"
