"""A switch on real SGLang 0.5.23: it drains a request still streaming, stops, starts, health-gates on the
real /health and commits; a restart shows in /server_info as 0.5.23 sends it; a profile the parser
accepts but the real server refuses at start rolls back, quoting the server's own error line."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from bench.run.server_identity import identity_of, restart_reasons
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.state_layout import StatePaths
from testsupport.net import until
from testsupport.real.realstack import START_TIMEOUT_S, RealStack

MARK = "KITTEST_REAL_MARK"


def profile(name: str, mark: str, max_running: int, extra_server: str = "") -> str:
    return (f'description = "real tier: {name}"\nstatus = "experimental"\nextends = "baseline"\n'
            f'[env]\n{MARK} = "{mark}"\n[server]\nmax-running-requests = {max_running}\n{extra_server}')


PROFILES = {
    "real-a": profile("real-a", "a", 8),
    "real-b": profile("real-b", "b", 16),
    # The parser takes any int; the real server refuses a context longer than the model's 2048 positions
    # (sglang/srt/configs/model_config.py:1296-1316) when the model config is read at start.
    "real-too-long": profile("real-too-long", "bad", 16, "context-length = 1000000\n"),
}
REFUSAL = "is greater than the derived context_length"
STREAM_TOKENS = 200  # tens of seconds of decoding on two cores: still running when the switch drains
# The drain reads sglang:num_running_reqs, which SGLang 0.5.23 refreshes at a prefill (counting the batch
# already running, not the new request) and then every decode_log_interval (default 40) decode steps
# (sglang/srt/managers/scheduler_components/metrics_reporter.py:853-860, 933-934): for a request's first
# 40 tokens it can read 0. The switch here comes after that, so the gauge counts the stream.
SWITCH_AFTER_CHUNKS = 45


def environ_of(pid: int) -> dict[str, str]:
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def server_info(stack: RealStack) -> dict:
    return httpx.get(f"{stack.server_url}/server_info", timeout=30).json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model):
    s = RealStack(tmp_path_factory.mktemp("switch"), tiny_model, "real-a")
    for name, text in PROFILES.items():
        s.write_profile(name, text)
    try:
        yield s.start()
    finally:
        s.stop()


def stream_generate(stack: RealStack, out: dict, streaming: threading.Event) -> None:
    body = {"text": "Drain me", "stream": True,
            "sampling_params": {"max_new_tokens": STREAM_TOKENS, "temperature": 0, "ignore_eos": True}}
    try:
        with httpx.stream("POST", f"{stack.server_url}/generate", json=body, timeout=300) as resp:
            out["status"] = resp.status_code
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    out["lines"].append(line)
                    out["last_at"] = time.time()
                    streaming.set()
    except httpx.HTTPError as exc:
        out["error"] = repr(exc)


def watch_health(stack: RealStack, seen: list[str], done: threading.Event) -> None:
    """/health answers, in order, until `done`: "200", "503", "refused" (nothing listens), "timeout"."""
    while not done.is_set():
        try:
            code = str(httpx.get(f"{stack.server_url}/health", timeout=10).status_code)
        except httpx.ConnectError:
            code = "refused"
        except httpx.TimeoutException:
            code = "timeout"
        except httpx.HTTPError:  # the answer cut off by the stop
            code = "cut"
        if not seen or seen[-1] != code:
            seen.append(code)
        done.wait(0.3)


def in_order(seen: list[str], wanted: list[str]) -> bool:
    it = iter(seen)
    return all(any(x == w for x in it) for w in wanted)


@pytest.fixture(scope="module")
def switched(stack):
    """Switch real-a -> real-b while a request streams; what was seen before, during and after."""
    before = {"status": stack.status(), "info": server_info(stack), "launch_pid": stack.launch_process().pid}
    again = server_info(stack)
    out: dict = {"lines": []}
    streaming = threading.Event()
    t = threading.Thread(target=stream_generate, args=(stack, out, streaming), daemon=True)
    t.start()
    assert streaming.wait(300), "the stream never started"
    until(lambda: len(out["lines"]) >= SWITCH_AFTER_CHUNKS, 600, f"{SWITCH_AFTER_CHUNKS} chunks streamed")
    lines_at_switch = len(out["lines"])
    health: list[str] = []
    done = threading.Event()
    watcher = threading.Thread(target=watch_health, args=(stack, health, done), daemon=True)
    watcher.start()
    t0 = time.monotonic()
    r = stack.switch("real-b", "off", timeout_s=START_TIMEOUT_S)
    took = time.monotonic() - t0
    done.set()
    watcher.join(30)
    t.join(300)
    return {"before": before, "again": again, "stream": out, "lines_at_switch": lines_at_switch,
            "response": r, "took": took, "after_info": server_info(stack), "health": health}


def test_switch_drains_the_stream_then_restarts_and_commits(stack, switched):
    r = switched["response"]
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "switched", body
    out = switched["stream"]
    assert "error" not in out and out["status"] == 200, out
    assert switched["lines_at_switch"] < STREAM_TOKENS // 2  # most of it was still to come
    assert out["lines"][-1] == "data: [DONE]"  # finished, not cut off
    last = json.loads(out["lines"][-2][len("data:"):])
    assert last["meta_info"]["completion_tokens"] == STREAM_TOKENS
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    entry = stack.history()[-1]
    assert entry["outcome"] == "switched" and entry["to"]["profile"] == "real-b"
    # The drain's length depends on how fast the stream decodes on this machine; what the drain guarantees
    # is an order: the stream's last line came before the old server had stopped (else it is cut off).
    d = entry["durations"]
    assert d["drain_s"] > 0, d
    assert out["last_at"] <= entry["ts"] + d["drain_s"] + d["stop_s"], (out["last_at"], entry["ts"], d)
    # SGLang's /health is a one-token generation with a time limit: on a loaded 2-core machine one probe can
    # read 503 while the switched server serves; the kit's reading follows the next probe.
    st = until(lambda: (s := stack.status())["health"] == "ok" and s, 180, "health ok after the switch")
    assert st["state"] == "serving" and st["profile"] == "real-b", st
    committed = json.loads(StatePaths(stack.state_dir).committed.read_text())
    assert committed["plan"]["name"] == "real-b", committed


def test_health_through_the_switch_is_up_refused_starting_up(switched):
    """What the health gate waits through on the real server: the old one answers, then nothing listens
    while the new one imports and loads (uvicorn binds last), then 503 while it warms up
    (ServerStatus.Starting, sglang/srt/entrypoints/http_server.py:735-736), then 200. The warm-up can end
    between two probes, and a loaded machine can make any probe time out or read 503 (the health check is a
    time-limited one-token generation), so those answers are allowed anywhere and not required."""
    seen = switched["health"]
    assert in_order(seen, ["200", "refused", "200"]), seen
    assert set(seen) <= {"200", "refused", "503", "timeout", "cut"}, seen


def test_the_new_server_runs_the_new_flag_and_env(stack, switched):
    launch = stack.launch_process()
    assert launch.pid != switched["before"]["launch_pid"]  # stopped and started, not reconfigured
    argv = launch.cmdline()
    assert argv[argv.index("--max-running-requests") + 1] == "16"
    assert switched["before"]["info"]["max_running_requests"] == 8
    assert switched["after_info"]["max_running_requests"] == 16
    for p in stack.schedulers():
        assert environ_of(p.pid)[MARK] == "b", p.cmdline()[0]
    until(lambda: httpx.get(f"{stack.server_url}/health", timeout=30).status_code == 200, 180, "healthy")
    r = stack.post("/generate", {"text": "after", "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 2


def test_a_restart_shows_in_the_identity_real_sglang_sends(switched):
    before = identity_of(switched["before"]["info"])
    assert before.start_time is None  # 0.5.23 sends none
    assert before.startup_time and before.random_seed is not None
    assert restart_reasons(before, identity_of(switched["again"])) == []  # the same server, asked twice
    reasons = restart_reasons(before, identity_of(switched["after_info"]))
    assert any("startup_time" in r for r in reasons), reasons


def test_a_profile_the_real_server_refuses_rolls_back_quoting_its_error(stack, switched):
    good = stack.status()["profile"]
    r = stack.switch("real-too-long", "off", timeout_s=START_TIMEOUT_S)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "rolled_back", body
    quoted = [body.get("error") or "", *body.get("log_tail", [])]
    assert any(REFUSAL in line for line in quoted), body
    st = stack.wait_state({"rolled_back"})
    assert st["profile"] == good and st["last_error"], st  # it names the exit; the quote is in log_tail
    assert stack.history()[-1]["outcome"] == "rolled_back"
    argv = stack.launch_process().cmdline()
    assert "--context-length" not in argv
    until(lambda: httpx.get(f"{stack.server_url}/health", timeout=30).status_code == 200, 60, "healthy again")


def test_a_server_that_crashes_at_every_start_is_reported_as_a_crash_loop(tmp_path, tiny_model):
    """Its own stack, started on the profile the real server refuses, with the default KIT_START_SECS: the
    server loads for longer than that before it refuses, so supervisord counts each start a success and would
    restart it for ever (never FATAL). With KIT_START_RETRIES=0 the first restart without a healthy answer
    is the crash loop: /status reads `failed` with the count, the kit stops the program, and the automatic
    restart waits its backoff (600 s here: nothing restarts during the test). The server's own error line is
    in its log."""
    s = RealStack(tmp_path / "crashy", tiny_model, "real-too-long",
                  extra_env={"KIT_START_RETRIES": "0", "KIT_RETRY_BACKOFF_S": "600"})
    for name, text in PROFILES.items():
        s.write_profile(name, text)
    try:
        s.start(states=frozenset({"failed"}), healthy=False)
        st = until(lambda: (x := s.status())["retry"]["next_at"] is not None and x, 3 * START_TIMEOUT_S,
                   "the crash loop announced")
        assert st["state"] == "failed" and "crash loop" in st["last_error"], st
        assert "without a healthy answer" in st["last_error"], st  # the kit's count, not supervisord's FATAL
        sup = Supervisor(StatePaths(s.state_dir).socket)
        until(lambda: sup.info()["statename"] == "STOPPED", 60, "the kit stops the loop")
        assert REFUSAL in StatePaths(s.state_dir).server_log.read_text(errors="replace")  # the real cause, logged
    finally:
        s.stop()
