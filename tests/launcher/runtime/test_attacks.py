"""Integration: the switch attacked as a hostile operator or a broken disk would attack it.

Each test names the defect it pins (numbers as in docs/switching.md's reliability section). Real
supervisord, real control API, the stand-in server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from launcher.runtime.process.server_exec import MIN_SERVER_GRACE_S, MIN_STOP_WAIT_S, server_grace_s
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.state_layout import StatePaths
from testsupport.net import ignore_http_errors, until
from testsupport.stack import REPO, KitStack

pytestmark = pytest.mark.stack  # every test here starts a process


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory):
    """One stack for the cases that must change nothing (each asserts that it did not), so a refused request costs
    one request, not one start; it carries a secret in its environment for the cases that look for leaks."""
    stack = KitStack(tmp_path_factory.mktemp("attacks-shared"), "baseline", "off", {"HF_TOKEN": "hf-secret-value"})
    try:
        yield stack.start()
    finally:
        stack.stop()


def _profile(stack: KitStack, name: str, body: str) -> None:
    (stack.profiles_dir / f"{name}.toml").write_text(
        f'description = "test {name}"\nstatus = "experimental"\nextends = "baseline"\n{body}'
    )


def _post(stack: KitStack, body: bytes | str, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{stack.control_url}/switch", content=body,
                      headers={"Authorization": f"Bearer {stack.token}", **(headers or {})}, timeout=60)


def _state_texts(stack: KitStack) -> str:
    out = []
    for p in stack.state_dir.rglob("*"):
        if p.is_file() and p.suffix != ".sock":
            out.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


# 1 ------------------------------------------------------------------------------------------------
def test_bug_1_a_profile_cannot_replace_the_control_token(kit_stack):
    stack = kit_stack()
    _profile(stack, "evil", '[env]\nKIT_CONTROL_TOKEN = "attacker"\n')
    r = stack.switch("evil", "off")
    assert r.status_code == 400
    assert "evil.toml" in r.json()["error"] and "env.KIT_CONTROL_TOKEN" in r.json()["error"]
    cli = stack.cli("check", "evil", "--spec", "off")
    assert cli.returncode == 2 and "env.KIT_CONTROL_TOKEN" in cli.stderr
    os.kill(stack.control_pid(), signal.SIGKILL)  # the control API restarts: the token must be the real one
    until(lambda: stack.status()["state"] == "serving", 20, "control API back")
    assert stack.switch("nccl-tuned", "off", token="attacker").status_code == 401
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    assert stack.debug_env()["env"]["NCCL_PROTO"] == "LL"  # the server has the profile's env ...
    others = [psutil.Process(stack.proc.pid), *(p for p in psutil.Process(stack.proc.pid).children(recursive=True)
                                               if "server_exec" not in " ".join(p.cmdline())
                                               and "testsupport.standin" not in " ".join(p.cmdline()))]
    assert len(others) == 3  # supervisord, the control API, the log tailer ... and none of these
    for proc in others:
        env = proc.environ()
        assert "NCCL_PROTO" not in env and "KIT_ACTIVE_PROFILE" not in env, proc.cmdline()


# 2 ------------------------------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_bug_2_disk_full_while_rendering_rolls_back(kit_stack, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        stack = kit_stack(extra_env={"KIT_STATE_DIR": str(mnt / "state")})
        pad = "x" * 100_000
        _profile(stack, "padded", f'[env]\nPAD_A = "{pad}"\nPAD_B = "{pad}"\n')
        filler = mnt / "filler"
        with open(filler, "wb") as fh:  # fill the disk, then give back 64 KiB: room for the journal, not the plan
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        os.truncate(filler, max(0, filler.stat().st_size - 65536))
        r = stack.switch("padded", "off")
        body = r.json()
        assert r.status_code == 200, body
        assert body["outcome"] == "rolled_back" and body["failed_step"] == "start"
        assert "No space left on device" in body["error"]
        assert httpx.get(f"{stack.server_url}/health", timeout=5).status_code == 200
        assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "baseline"
        hist = [json.loads(x) for x in (mnt / "state" / "history.jsonl").read_text().splitlines()]
        assert hist[-1]["outcome"] == "rolled_back"
        assert not (mnt / "state" / "switch.json").exists()
        stack.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# 3 ------------------------------------------------------------------------------------------------
def test_bug_3_control_api_death_mid_switch_is_resolved_and_recorded(kit_stack):
    stack = kit_stack(extra_env={"STANDIN_STARTUP_DELAY_S": "2"})
    control = stack.control_pid()
    result: dict = {}

    import threading

    def fire() -> None:
        try:
            result["r"] = stack.switch("nccl-tuned", "off")
        except httpx.HTTPError as exc:
            result["err"] = exc

    t = threading.Thread(target=fire)
    t.start()
    until(lambda: stack.status()["phase"] == "health", 20, "health phase")
    journal = json.loads((stack.state_dir / "switch.json").read_text())
    assert journal["phase"] == "health" and journal["to"]["profile"] == "nccl-tuned"
    os.kill(control, signal.SIGKILL)
    t0 = time.monotonic()
    t.join()
    assert "err" in result  # the client lost its answer with the process
    st = until(lambda: (s := stack.status())["state"] == "serving" and s["health"] == "ok" and s, 30, "recovered")
    elapsed = time.monotonic() - t0
    hist = stack.history()
    assert hist[-1]["outcome"] == "interrupted" and hist[-1]["resolution"] == "kept"
    assert hist[-1]["interrupted_phase"] == "health" and hist[-1]["id"] == journal["id"]
    assert st["profile"] == "nccl-tuned"
    assert json.loads((stack.state_dir / "committed.json").read_text())["plan"]["name"] == "nccl-tuned"
    assert not (stack.state_dir / "switch.json").exists()
    assert elapsed < 30


def test_bug_3_an_unhealthy_target_left_by_a_dead_control_api_is_rolled_back(kit_stack):
    stack = kit_stack(extra_env={"KIT_HEALTH_TIMEOUT_S": "4"})
    control = stack.control_pid()
    import threading

    t = threading.Thread(target=lambda: ignore_http_errors(lambda: stack.switch("hangs", "off", timeout_s=60)))
    t.start()
    until(lambda: stack.status()["phase"] == "health", 20, "health phase")
    os.kill(control, signal.SIGKILL)
    t.join()
    until(lambda: stack.status()["state"] == "rolled_back", 40, "rolled back")
    hist = stack.history()
    assert (hist[-1]["outcome"], hist[-1]["resolution"]) == ("interrupted", "rolled_back")
    assert "health timeout" in hist[-1]["gate_error"]
    assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "baseline"


# 4 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "-1", "0", "true", '"5"', "1e9", "[]"])
def test_bug_4_a_bad_timeout_is_400_and_blocks_nothing(kit_stack, value):
    stack = kit_stack()
    r = _post(stack, f'{{"profile": "nccl-tuned", "spec": "off", "timeout_s": {value}}}')
    assert r.status_code == 400, r.text
    assert "timeout_s" in r.json()["error"]
    assert stack.status()["state"] == "serving" and not (stack.state_dir / "switch.json").exists()
    assert stack.switch("nccl-tuned", "off", timeout_s=30).json()["outcome"] == "switched"


# 5 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("profile", "spec"),
    [("/tmp/x/evil", "off"), ("../../x", "off"), ("baseline", "../spec/off"), ("baseline", "spec/off"),
     ("Baseline", "off"), ("x" * 300, "off"), ("baseline", "o" * 300), ("", "off")],
)
def test_bug_5_names_are_not_paths(shared_stack, profile, spec):
    stack = shared_stack
    evil = Path("/tmp/x")
    evil.mkdir(exist_ok=True)
    (evil / "evil.toml").write_text('description = "outside"\n')
    before = stack.history()
    r = stack.switch(profile, spec)
    assert r.status_code == 400, r.text
    assert "not valid" in r.json()["error"] and "a name, not a path" in r.json()["error"]
    assert stack.history() == before and before[-1]["outcome"] == "started"  # nothing was recorded


def test_bug_5_extends_cannot_name_a_path(kit_stack):
    stack = kit_stack()
    _profile(stack, "climber", "")
    (stack.profiles_dir / "climber.toml").write_text('description = "x"\nextends = "../../tmp/x/evil"\n')
    r = stack.switch("climber", "off")
    assert r.status_code == 400 and "key 'extends'" in r.json()["error"]


# 6 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "key"),
    [('[env]\nA = "a\\u0000NCCL_ALGO=Tree"\n', "env"), ('[env]\n"A=B" = "1"\n', "env"),
     ('[env]\nA = "line\\nNCCL_ALGO=Tree"\n', "env"), ('[server]\nserved-model-name = "a\\u0000b"\n', "server")],
)
def test_bug_6_nul_newline_and_equals_cannot_smuggle_variables(shared_stack, body, key):
    stack = shared_stack
    _profile(stack, "smuggler", body)
    r = stack.switch("smuggler", "off")
    assert r.status_code == 400, r.text
    assert "smuggler.toml" in r.json()["error"] and f"key '{key}" in r.json()["error"]
    assert "NCCL_ALGO" not in stack.debug_env()["env"]


# 7 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ref", ["${KIT_CONTROL_TOKEN}", "${KIT_CONTROL_TOKEN:-x}", "${HF_TOKEN}", "${KIT_STATE_DIR}"])
def test_bug_7_a_profile_cannot_read_the_token_or_the_kits_settings(shared_stack, ref):
    stack = shared_stack
    _profile(stack, "leak", f'[server]\nserved-model-name = "{ref}"\n')
    r = stack.switch("leak", "off")
    assert r.status_code == 400 and "may not read it" in r.json()["error"]
    texts = _state_texts(stack) + json.dumps(stack.status())
    texts += httpx.get(f"{stack.server_url}/v1/models", timeout=5).text
    assert stack.token not in texts and "hf-secret-value" not in texts


def test_bug_7_secrets_in_the_server_log_never_reach_status(kit_stack):
    stack = kit_stack(extra_env={"HF_TOKEN": "hf-secret-value"})
    log = stack.state_dir / "logs" / "sglang.log"
    with open(log, "a") as fh:
        fh.write("downloading with token hf-secret-value and test-token\n")
    r = stack.switch("crashy", "off")
    body = json.dumps(r.json()) + json.dumps(stack.status())
    assert r.json()["outcome"] == "rolled_back"
    assert "hf-secret-value" not in body and stack.token not in body and "<hidden>" in body
    for name in ("committed.json", "profile.json", "cmdline", "history.jsonl"):
        assert oct((stack.state_dir / name).stat().st_mode & 0o777) == "0o600", name


# 8 ------------------------------------------------------------------------------------------------
def test_bug_8_damaged_history_never_breaks_status(kit_stack):
    stack = kit_stack()
    with open(stack.state_dir / "history.jsonl", "ab") as fh:
        fh.write(b"\xff\xfe\x00 broken\n[1]\n{\"torn\": ")
    st = stack.status()
    assert st["history_skipped"] == 3 and st["history"][0]["outcome"] == "started"
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    st = stack.status()
    assert [h["outcome"] for h in st["history"]] == ["started", "switched"] and st["history_skipped"] == 3


# 9 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("record", ['{"plan": null}', '{"committed_at": 1, "plan": {"name": "fused"}}', "[]", "\xff"])
def test_bug_9_a_wrongly_shaped_commit_record_does_not_stop_startup(kit_stack, record):
    stack = kit_stack(start=False)
    stack.state_dir.mkdir(parents=True)
    (stack.state_dir / "committed.json").write_text(record, encoding="latin-1")
    stack.start()
    assert stack.status()["profile"] == "baseline"
    assert "warning: ignoring" in stack.log.read_text()


# 10 -----------------------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _orphans(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_bug_10_grandchildren_in_their_own_session_do_not_survive(kit_stack, tmp_path):
    pids = tmp_path / "orphans"
    stack = kit_stack(extra_env={"STANDIN_SPAWN_ORPHAN": str(pids)})
    first = until(lambda: _orphans(pids), 10, "orphan started")[0]
    assert os.getsid(first) != os.getsid(stack.debug_env()["pid"])  # it really left the session
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)  # the server dies: supervisord restarts it
    until(lambda: len(_orphans(pids)) >= 2 and stack.status()["health"] == "ok", 20, "restart")
    until(lambda: not _alive(first), 10, "first orphan ended after the restart")
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"  # a switch
    second = _orphans(pids)[1]
    until(lambda: not _alive(second), 10, "second orphan ended after the switch")
    third = until(lambda: _orphans(pids)[2:], 10, "orphan of the new server")[0]
    os.kill(stack.proc.pid, signal.SIGTERM)  # serve's SIGTERM
    stack.proc.wait(timeout=30)
    until(lambda: not _alive(third), 10, "third orphan ended after SIGTERM")


# 11 -----------------------------------------------------------------------------------------------
def test_bug_11_bad_requests_are_400_or_401_never_500(kit_stack):
    stack = kit_stack()
    r = httpx.post(f"{stack.control_url}/switch", json={"profile": "nccl-tuned"},
                   headers=[(b"Authorization", b"Bearer \xff\xfe\xc3")], timeout=10)
    assert r.status_code == 401 and "Traceback" not in r.text
    deep = "[" * 100_000 + "]" * 100_000
    r = _post(stack, f'{{"profile": {deep}}}')
    assert r.status_code in (400, 413) and "Traceback" not in r.text
    r = _post(stack, "[" * 5000 + "]" * 5000)
    assert r.status_code == 400 and "Traceback" not in r.text
    for body in ("not json", '{"profile": 1}', '{"spec": "off"}', '{"profile": "baseline", "extra": 1}', "null"):
        r = _post(stack, body)
        assert r.status_code == 400, (body, r.text)
    assert stack.status()["state"] == "serving"


def test_bug_11_a_broken_entry_in_a_profiles_folder_hides_nothing(kit_stack, tmp_path):
    stack = kit_stack()
    (tmp_path / "elsewhere.toml").write_text('description = "outside the folder"\n')
    (stack.profiles_dir / "loop.toml").symlink_to(stack.profiles_dir / "loop.toml")
    (stack.profiles_dir / "dangling.toml").symlink_to(stack.profiles_dir / "missing")
    (stack.profiles_dir / "outside.toml").symlink_to(tmp_path / "elsewhere.toml")
    os.mkfifo(stack.profiles_dir / "fifo.toml")
    (stack.profiles_dir / "bad.toml").write_bytes(b"\xff\xfe")
    r = httpx.get(f"{stack.control_url}/profiles", timeout=10)
    assert r.status_code == 200
    names = {p["name"]: p for p in r.json()}
    assert "baseline" in names and not {"loop", "dangling", "outside", "fifo"} & set(names)
    assert names["bad"]["status"] == "invalid"
    cli = stack.cli("profiles")
    assert cli.returncode == 0 and "AssertionError" not in cli.stderr and "baseline" in cli.stdout


def test_bug_11_a_read_only_state_dir_is_a_clear_error(kit_stack, tmp_path):
    stack = kit_stack(start=False)
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = False
    if os.geteuid() == 0:  # root writes through permissions: make it truly read-only
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)]).returncode == 0
    else:
        ro.chmod(0o500)
    try:
        r = stack.cli("serve", "--dry-run", env={"KIT_STATE_DIR": str(ro / "state") if not mounted else str(ro)})
        assert r.returncode == 2, r.stderr
        assert "KIT_STATE_DIR" in r.stderr and "cannot write there" in r.stderr and "Traceback" not in r.stderr
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(ro)], check=False)


def test_bug_11_a_crash_loop_is_reported_and_recovered(kit_stack, tmp_path):
    """While the server is down /status never says serving; once supervisord gives up (FATAL) it says
    failed within one monitor period plus a probe (asserted with a margin); the server comes back when
    the fault is gone. KIT_START_SECS=10 makes every crash a failed start however slow the import."""
    flag = tmp_path / "crash"
    stack = kit_stack(extra_env={"STANDIN_CRASH_WHILE": str(flag), "KIT_RETRY_BACKOFF_S": "1", "KIT_START_SECS": "10"})
    sup = Supervisor(StatePaths(stack.state_dir).socket)
    flag.write_text("1")
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)
    until(lambda: stack.status()["state"] == "down", 5, "down within a few monitor periods of the kill")
    seen: list[str] = []

    def gave_up() -> bool:
        seen.append(stack.status()["state"])
        return sup.info()["statename"] == "FATAL"

    until(gave_up, 120, "supervisord gives up")
    st = until(lambda: (s := stack.status())["state"] == "failed" and s, 5, "failed soon after FATAL")
    assert "serving" not in seen and "down" in seen, seen
    assert "crash loop" in st["last_error"] and "FATAL" in st["last_error"]
    flag.unlink()
    st = until(lambda: (s := stack.status())["state"] == "serving" and s["health"] == "ok" and s, 60, "serving again")
    assert st["retry"]["attempts"] >= 1 and st["last_error"] is None


def test_a_server_that_dies_after_start_secs_is_a_crash_loop_the_kit_stops(kit_stack, tmp_path):
    """A real server loads for longer than KIT_START_SECS and then dies: supervisord counts each start a
    success and restarts it for ever (never FATAL). Past KIT_START_RETRIES restarts without one healthy
    answer the kit calls it a crash loop and stops the program until the backoff (600 s here) ends; a switch
    brings it back once the fault is gone. The backoff's restart itself: test_runtime_lifecycle.py."""
    flag = tmp_path / "crash"
    stack = kit_stack(extra_env={"STANDIN_CRASH_WHILE": str(flag), "STANDIN_LOAD_DELAY_S": "1.5",
                                 "KIT_START_SECS": "1", "KIT_START_RETRIES": "2", "KIT_RETRY_BACKOFF_S": "600"})
    sup = Supervisor(StatePaths(stack.state_dir).socket)
    flag.write_text("1")
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)
    st = until(lambda: (s := stack.status())["state"] == "failed" and s["retry"]["next_at"] is not None and s, 120,
               "the kit gives up")
    assert "crash loop" in st["last_error"] and "without a healthy answer" in st["last_error"], st
    assert st["restarts"] >= 3
    until(lambda: sup.info()["statename"] == "STOPPED", 30, "the kit stops the loop supervisord would go on with")
    flag.unlink()
    body = stack.switch("baseline", "off").json()  # from failed, the same plan is started again
    assert body["outcome"] == "switched", body
    st = stack.status()
    assert st["state"] == "serving" and st["retry"]["next_at"] is None


def test_supervisord_killed_leaves_no_control_api_or_server_behind(kit_stack):
    """SIGKILL to supervisord outside a container (where it is not PID 1): its control API and the server's
    whole tree end with it, so none of them drives or blocks the next serve on this state dir."""
    stack = kit_stack()
    sup = psutil.Process(int(StatePaths(stack.state_dir).supervisord_pid.read_text()))
    tree = sup.children(recursive=True)
    assert any("control_api" in " ".join(p.cmdline()) for p in tree) and any(
        "server_exec" in " ".join(p.cmdline()) for p in tree)
    sup.kill()
    gone, alive = psutil.wait_procs(tree, timeout=60)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    stack.proc.wait(timeout=10)  # `launcher serve` became supervisord: it is the one killed
    st = stack.start().status()  # a new serve on the same state dir and ports: nothing of the old one in the way
    assert st["state"] == "serving" and st["health"] == "ok"


def test_bug_21_a_killed_server_reads_down_then_serving_again(kit_stack):
    """supervisord restarts a killed server: /status says down (never serving) until it answers again."""
    stack = kit_stack()
    before = stack.status()
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)
    st = until(lambda: (s := stack.status())["state"] == "down" and s, 5, "down")
    assert st["health"] != "ok" and "server down" in st["last_error"]
    st = until(lambda: (s := stack.status())["state"] == "serving" and s, 60, "serving again")
    assert st["restarts"] >= before["restarts"] + 1 and st["last_error"] is None and st["health"] == "ok"


def test_bug_21_the_default_spec_is_one_fact(kit_stack):
    """SPEC=off: /specs reports off, and a switch without a spec runs off (it used to run eagle3)."""
    stack = kit_stack(extra_env={"SPEC": "off"})
    assert httpx.get(f"{stack.control_url}/specs", timeout=10).json()["default"] == "off"
    r = stack.switch("nccl-tuned", spec=None)
    assert r.status_code == 200, r.text
    assert stack.status()["spec"] == "off"
    assert httpx.get(f"{stack.control_url}/plan", timeout=10).json()["plan"]["spec"] == "off"


# 12 -----------------------------------------------------------------------------------------------
def test_bug_12_status_health_is_fresh_during_a_switch(kit_stack):
    """While the new (hanging) server's gate runs, /status's health is fresh and never ok. The samples end at
    the first other phase: the rollback then stops, starts and gates the old plan, whose gate reads `health`
    too and whose server does answer ok (a loaded machine's slow samples once reached into it)."""
    stack = kit_stack(extra_env={"KIT_HEALTH_TIMEOUT_S": "6"})
    import threading

    t = threading.Thread(target=lambda: stack.switch("hangs", "off"))
    t.start()
    until(lambda: stack.status()["phase"] == "health", 20, "health phase")
    seen = []
    for _ in range(10):
        st = stack.status()
        if st["phase"] != "health":
            break  # the gate ended: the rollback's phases follow
        seen.append((st["health"], st["health_age_s"]))
        time.sleep(0.2)
    t.join()
    assert seen and all(h != "ok" for h, _ in seen), seen  # the new server answers 503
    assert all(age is not None and age < 3 for _, age in seen), seen


def kill_every_process_of(stack: KitStack) -> bool:
    """SIGKILL every live process of the stack: serve/supervisord, the programs naming its state dir, and
    all their descendants. True when one was found (so another sweep is due)."""
    found: set[psutil.Process] = set()
    for p in psutil.process_iter(["cmdline"]):
        if str(stack.state_dir) in " ".join(p.info["cmdline"] or []):
            found.add(p)
    if stack.proc.poll() is None:
        found.add(psutil.Process(stack.proc.pid))
    for p in list(found):
        try:
            found.update(p.children(recursive=True))
        except psutil.Error:
            pass
    alive = False
    for p in found:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
                alive = True
        except psutil.Error:
            pass
    return alive


def test_bug_3_a_container_restart_mid_switch_is_resolved_and_recorded(kit_stack):
    """The whole container dies during a switch (every process SIGKILLed); `serve` starts again."""
    stack = kit_stack(extra_env={"STANDIN_STARTUP_DELAY_S": "2"})
    import threading

    t = threading.Thread(target=lambda: ignore_http_errors(lambda: stack.switch("nccl-tuned", "off")))
    t.start()
    until(lambda: stack.status()["phase"] == "health", 20, "health phase")
    # A container's processes all die with it. A snapshot of the tree misses a child supervisord forks just
    # after it (which holds the state dir's lock until it execs), so sweep until none is left.
    until(lambda: not kill_every_process_of(stack), 30, "every process of the stack gone")
    stack.proc.wait(timeout=10)
    t.join()
    assert (stack.state_dir / "switch.json").exists()
    stack.start(timeout=40)  # same PROFILE/SPEC: serve resumes the committed plan, the control API resolves
    hist = until(lambda: (h := stack.history())[-1]["outcome"] == "interrupted" and h, 30, "recorded")
    assert hist[-1]["resolution"] == "kept" and hist[-1]["running"]["profile"] == "baseline"
    assert stack.status()["profile"] == "baseline" and not (stack.state_dir / "switch.json").exists()


# 22 -----------------------------------------------------------------------------------------------
def test_bug_22_a_second_serve_on_the_same_state_dir_changes_nothing(kit_stack):
    """A second `launcher serve` with another profile exits 2 naming the owner's pid, before it writes."""
    stack = kit_stack()
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    paths = StatePaths(stack.state_dir)
    watched = [paths.boot, paths.supervisord_conf, paths.profile_json, paths.profile_env, paths.cmdline, paths.committed]
    before = {p: p.read_bytes() for p in watched}
    r = subprocess.run([sys.executable, "-m", "launcher", "serve"], cwd=REPO, capture_output=True, text=True,
                       env={**stack.env, "PROFILE": "fused"}, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"pid {stack.proc.pid}" in r.stderr and "already served" in r.stderr and "Traceback" not in r.stderr
    assert {p: p.read_bytes() for p in watched} == before
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)  # supervisord restarts the server: still nccl-tuned
    until(lambda: stack.status()["state"] == "serving" and stack.debug_env()["env"].get("KIT_ACTIVE_PROFILE") == "nccl-tuned",
          60, "restarted on the same plan")


def test_bug_22_a_stop_wait_too_short_for_containment_is_refused(kit_stack):
    stack = kit_stack(start=False)
    r = stack.cli("serve", "--dry-run", env={"KIT_STOP_WAIT_S": str(MIN_STOP_WAIT_S - 1)})
    assert r.returncode == 2 and "KIT_STOP_WAIT_S" in r.stderr and "Traceback" not in r.stderr
    assert server_grace_s(MIN_STOP_WAIT_S) >= MIN_SERVER_GRACE_S


def test_bug_22_containment_holds_at_the_shortest_stop_wait(kit_stack, tmp_path):
    """A server and its setsid daemon that both ignore SIGTERM are gone after a switch and after serve's
    SIGTERM, with KIT_STOP_WAIT_S at its minimum."""
    pids = tmp_path / "orphans"
    stack = kit_stack(extra_env={"STANDIN_SPAWN_ORPHAN": str(pids), "STANDIN_IGNORE_SIGTERM": "1",
                                 "KIT_STOP_WAIT_S": str(MIN_STOP_WAIT_S)})
    first = until(lambda: _orphans(pids), 10, "daemon started")[0]
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    until(lambda: not _alive(first), 10, "the first daemon ended by the switch")
    second = until(lambda: _orphans(pids)[1:], 10, "daemon of the new server")[0]
    os.kill(stack.proc.pid, signal.SIGTERM)
    stack.proc.wait(timeout=60)
    until(lambda: not _alive(second), 10, "the second daemon ended by serve's SIGTERM")


def _restart_control(stack: KitStack) -> int:
    """SIGKILL the control API and wait until supervisord's new one answers; its pid."""
    old = stack.control_pid()
    os.kill(old, signal.SIGKILL)

    def new_pid() -> int | None:
        try:
            pid = stack.control_pid()
        except AssertionError:  # between the old one's death and the new one's start
            return None
        return pid if pid != old and stack.status() else None

    return until(new_pid, 60, "control API back")


def test_bug_22_retry_state_is_reset_by_a_switch(kit_stack, tmp_path):
    """A crash loop's pending retry must not survive a switch: a later crash is reported, not restarted at once."""
    flag = tmp_path / "crash"
    stack = kit_stack(extra_env={"STANDIN_CRASH_WHILE": str(flag), "KIT_RETRY_BACKOFF_S": "600", "KIT_START_SECS": "10"})
    flag.write_text("1")
    os.kill(stack.debug_env()["pid"], signal.SIGKILL)
    until(lambda: stack.status()["retry"]["next_at"] is not None, 120, "a retry pending after FATAL")
    flag.unlink()
    assert stack.switch("nccl-tuned", "off").json()["outcome"] in ("switched", "rolled_back")
    st = stack.status()
    assert st["retry"]["next_at"] is None and st["state"] in ("serving", "rolled_back"), st


def test_bug_22_a_history_line_longer_than_the_tail_window_is_counted(kit_stack):
    stack = kit_stack()
    with open(StatePaths(stack.state_dir).history, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"outcome": "x", "log_tail": ["\ufffd" * 1000] * 300}) + "\n")
    st = stack.status()
    assert st["history_skipped"] == 1 and st["history"] == []


def test_bug_22_a_fifo_as_history_never_blocks_status(kit_stack):
    stack = kit_stack()
    hist = StatePaths(stack.state_dir).history
    hist.unlink()
    os.mkfifo(hist)
    st = httpx.get(f"{stack.control_url}/status", timeout=5).json()  # a blocked event loop would time out
    assert st["history"] == [] and st["history_skipped"] == 1
    r = stack.switch("nccl-tuned", "off")  # its outcome could not be recorded: refused before anything changes
    assert r.status_code == 500 and "history.jsonl is a FIFO" in r.json()["error"], r.text
    assert "nothing was changed" in r.json()["error"]
    st = httpx.get(f"{stack.control_url}/status", timeout=5).json()
    assert (st["state"], st["profile"]) == ("serving", "baseline")


def test_bug_22_a_directory_as_the_journal_is_resolved_once(kit_stack):
    stack = kit_stack()
    journal_path = StatePaths(stack.state_dir).journal
    journal_path.mkdir()
    _restart_control(stack)
    until(lambda: stack.status()["state"] == "serving" and not journal_path.exists(), 60, "resolved")
    interrupted = [h for h in stack.history() if h.get("outcome") == "interrupted"]
    assert len(interrupted) == 1, interrupted
    _restart_control(stack)
    until(lambda: stack.status()["state"] == "serving", 60, "serving")
    assert len([h for h in stack.history() if h.get("outcome") == "interrupted"]) == 1
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    assert list(stack.state_dir.glob("switch.json.damaged-*"))


def test_bug_22_a_journal_whose_outcome_is_recorded_gets_no_second_one(kit_stack):
    stack = kit_stack()
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    done = stack.history()[-1]
    StatePaths(stack.state_dir).journal.write_text(json.dumps(
        {"id": done["id"], "started_at": 1.0, "updated_at": 1.0, "phase": "health", "from": done["from"], "to": done["to"]}))
    _restart_control(stack)
    until(lambda: stack.status()["state"] == "serving" and not StatePaths(stack.state_dir).journal.exists(), 60, "resolved")
    assert [h.get("id") for h in stack.history()].count(done["id"]) == 1


def test_bug_22_without_any_plan_file_health_is_still_probed(kit_stack):
    stack = kit_stack()
    paths = StatePaths(stack.state_dir)
    paths.profile_json.unlink()
    paths.committed.unlink()
    _restart_control(stack)
    st = until(lambda: (s := stack.status())["health"] == "ok" and s, 30, "health ok")
    assert st["state"] == "serving" and st["profile"] is None and "no readable plan" in st["last_error"]
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    assert stack.status()["profile"] == "nccl-tuned"


# 36 -----------------------------------------------------------------------------------------------
# One damaged state file must never take the control API down (switch-counts.json: tests/launcher/runtime/api/test_metrics.py).
def _strict_json(text: str) -> object:
    """JSON as a strict client parses it: NaN and Infinity are not JSON."""
    def refuse(name: str) -> object:
        raise ValueError(f"{name} in a JSON answer")

    return json.loads(text, parse_constant=refuse)


def test_bug_36_history_as_a_link_is_never_appended_through(kit_stack, tmp_path):
    """history.jsonl as a symbolic link: the next switch appended its entry to the link's target (as root, any file).
    Now a switch is refused before it touches the server, the target is never read or written, and /status answers."""
    stack = kit_stack()
    paths = StatePaths(stack.state_dir)
    victim = tmp_path / "passwd-copy"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    paths.history.unlink(missing_ok=True)
    paths.history.symlink_to(victim)
    st = stack.status()
    assert st["history"] == [] and st["history_skipped"] == 1
    r = stack.switch("nccl-tuned", "off")
    assert r.status_code == 500 and "history.jsonl is a symbolic link" in r.json()["error"], r.text
    assert "nothing was changed" in r.json()["error"]
    st = stack.status()
    assert (st["state"], st["profile"]) == ("serving", "baseline")
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    paths.history.unlink()  # moved away: switches are recorded again, in a regular file
    assert stack.switch("nccl-tuned", "off").json()["outcome"] == "switched"
    assert stack.history()[-1]["outcome"] == "switched" and not paths.history.is_symlink()
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"


def test_bug_36_hold_numbers_are_bounded_and_a_hold_that_never_lapses_holds_nothing(kit_stack):
    """POST /hold granted pid 2**40 (a client's os.kill then raised OverflowError) and ttl_s 1e-300; tune-hold.json with
    expires_at Infinity never lapsed and /status answered `Infinity` (not JSON)."""
    stack = kit_stack()
    url, auth = f"{stack.control_url}/hold", {"Authorization": f"Bearer {stack.token}"}
    for body, key in (({"holder": "t", "ttl_s": 60, "host": "h", "pid": 2**40}, "pid"),
                      ({"holder": "t", "ttl_s": 60, "host": "h", "take_over_pid": 2**40}, "take_over_pid"),
                      ({"holder": "t", "ttl_s": 1e-300}, "ttl_s")):
        r = httpx.post(url, json=body, headers=auth, timeout=10)
        assert r.status_code == 400 and key in r.json()["error"], (body, r.text)
    assert stack.status()["tune_hold"] is None
    hold = StatePaths(stack.state_dir).tune_hold
    for forged in ("Infinity", "1e999", "NaN", "1e300"):
        hold.write_text(f'{{"id": "x", "holder": "forged", "since": 0, "expires_at": {forged}, "host": "h", "pid": 42}}')
        st = _strict_json(httpx.get(f"{stack.control_url}/status", timeout=10).text)
        assert st["tune_hold"] is None, forged
    r = httpx.post(url, json={"holder": "tune A", "ttl_s": 60, "host": "h", "pid": 4194304}, headers=auth, timeout=10)
    assert r.status_code == 200, r.text
    assert _strict_json(httpx.get(f"{stack.control_url}/status", timeout=10).text)["tune_hold"]["holder"] == "tune A"


def test_bug_36_supervisord_killed_mid_switch_is_interrupted_answered_in_json_and_resolved(kit_stack):
    """supervisord SIGKILLed during a switch: it was recorded `failed` with a raw ConnectionRefusedError and the client
    got a plain-text 500. Now the answer is JSON, outcome `interrupted` with a readable error; the journal stays, and the
    next serve on the state dir resolves the switch and records one `interrupted` entry naming supervisord."""
    import threading

    stack = kit_stack()
    paths = StatePaths(stack.state_dir)
    result: dict = {}

    def fire() -> None:
        try:
            result["r"] = stack.switch("hangs", "off", timeout_s=60)
        except httpx.HTTPError as exc:
            result["err"] = exc

    t = threading.Thread(target=fire)
    t.start()
    until(lambda: stack.status()["phase"] == "health", 30, "health phase")
    sup = psutil.Process(int(paths.supervisord_pid.read_text()))
    tree = sup.children(recursive=True)
    sup.kill()
    t.join(120)
    r = result.get("r")
    assert r is not None, result
    assert r.status_code == 500 and r.headers["content-type"].startswith("application/json"), r.text
    answer = r.json()
    assert answer["outcome"] == "interrupted" and answer["interrupted_phase"] == "health", answer
    assert "supervisord stopped answering" in answer["error"] and "ConnectionRefusedError" not in answer["error"]
    gone, alive = psutil.wait_procs(tree, timeout=60)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    stack.proc.wait(timeout=10)
    kept = json.loads(paths.journal.read_text())
    assert kept["id"] == answer["id"] and kept["cut_short"].startswith("supervisord stopped answering")
    assert [h["outcome"] for h in stack.history() if h.get("id") == answer["id"]] == []  # not recorded as failed
    stack.start(timeout=60)  # a new serve: it resolves the switch cut short
    hist = until(lambda: (h := stack.history())[-1].get("id") == answer["id"] and h, 30, "recorded")
    assert hist[-1]["outcome"] == "interrupted" and hist[-1]["resolution"] == "kept"
    assert "supervisord stopped answering" in hist[-1]["error"]
    assert [h.get("id") for h in hist].count(answer["id"]) == 1
    assert stack.status()["profile"] == "baseline" and not paths.journal.exists()
