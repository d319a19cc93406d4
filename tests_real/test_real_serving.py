"""`launcher serve` over real SGLang 0.5.23: the command line the kit composed is the one running, and
the plan's env reaches both TP scheduler processes while what the profile leaves alone keeps SGLang's value."""

from __future__ import annotations

import json
import shlex
import time

import httpx

from launcher.state_layout import StatePaths
from testsupport.net import until
from testsupport.real import overlay


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment as exec'd: /proc/<pid>/environ."""
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def test_serve_runs_the_command_line_the_kit_composed(serving_stack):
    # SGLang's /health is a one-token generation with a time limit: one probe can read 503 on a loaded machine
    st = until(lambda: (s := serving_stack.status())["health"] == "ok" and s, 180, "health ok")
    assert st["state"] == "serving", st
    assert st["profile"] == "real-serving" and st["spec"] == "off"
    paths = StatePaths(serving_stack.state_dir)
    plan = json.loads(paths.profile_json.read_text())
    composed = plan["argv"]
    assert composed[:3] == ["python", "-m", "sglang.launch_server"]
    running = serving_stack.launch_process().cmdline()
    assert running[1:] == composed[1:], f"running {running} != composed {composed}"
    assert shlex.split(paths.cmdline.read_text().strip())[-len(composed) + 1:] == composed[1:]
    # The overlay's flags are in it, and SGLang itself reports the same command line.
    for flag in ("--device", "--max-total-tokens", "--cuda-graph-backend-prefill"):
        assert flag in composed
    info = httpx.get(f"{serving_stack.server_url}/server_info", timeout=30).json()
    assert shlex.split(info["launch_command"]) == composed[3:]
    assert info["tp_size"] == 2 and info["device"] == "cpu" and info["version"] == "0.5.23"
    # the running cap the bench reads (bench/client/server_client.py running_cap): the scheduler's own, per DP rank
    # (internal_state.py:73); under `off` SGLang sizes it from the KV cache (kv_cache_configurator.py:3119-3132)
    from bench.client.server_client import running_cap

    caps = [s["effective_max_running_requests_per_dp"] for s in info["internal_states"]]
    assert all(isinstance(c, int) and c >= 1 for c in caps) and running_cap(info) == sum(caps)


def test_the_plan_env_reaches_both_tp_schedulers(serving_stack, serving_mark):
    schedulers = serving_stack.schedulers()
    titles = sorted(p.cmdline()[0] for p in schedulers)
    assert titles == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"], titles
    plan_env = json.loads(StatePaths(serving_stack.state_dir).profile_json.read_text())["env"]
    var, value = serving_mark
    assert plan_env[var] == value
    for e in overlay.ENV:
        assert plan_env[e.key] == str(e.value)
    for p in schedulers:
        env = environ_of(p.pid)
        for key, value in plan_env.items():
            assert env.get(key) == value, f"{p.cmdline()[0]}: {key}={env.get(key)!r}, plan says {value!r}"
        assert env["KIT_ACTIVE_PROFILE"] == "real-serving"


def test_a_variable_the_profile_leaves_alone_keeps_sglangs_value(serving_stack):
    """SGLang sets NCCL_CUMEM_ENABLE=0 and CUDA_DEVICE_MAX_CONNECTIONS=8 in its launcher process when
    nothing set them (sglang/srt/entrypoints/engine.py:1898-1919); the kit's profile says nothing of
    them, so its sitecustomize must not clear or replace them in the workers."""
    plan_env = json.loads(StatePaths(serving_stack.state_dir).profile_json.read_text())["env"]
    assert "NCCL_CUMEM_ENABLE" not in plan_env and "CUDA_DEVICE_MAX_CONNECTIONS" not in plan_env
    assert "NCCL_CUMEM_ENABLE" not in environ_of(serving_stack.launch_process().pid)  # set by SGLang, not given
    for p in serving_stack.schedulers():
        env = environ_of(p.pid)
        assert env.get("NCCL_CUMEM_ENABLE") == "0", p.cmdline()[0]
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "8", p.cmdline()[0]


def test_health_runs_a_one_token_generation(serving_stack):
    """0.5.23's /health is /health_generate unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0
    (sglang/srt/entrypoints/http_server.py:721-748): it sends a 1-token request and answers after its
    first poll a second later (:777), so every probe costs a second and a generation. The stand-in
    answers /health at once."""
    def probe(path: str) -> tuple[httpx.Response, float] | None:
        t0 = time.monotonic()
        r = httpx.get(f"{serving_stack.server_url}{path}", timeout=60)
        return (r, time.monotonic() - t0) if r.status_code == 200 else None  # a loaded machine can read 503

    for path in ("/health", "/health_generate"):
        r, took = until(lambda path=path: probe(path), 180, f"{path} 200")
        assert r.text == "", (path, r.text)
        assert took >= 1.0, f"{path} answered in {took:.2f} s: no generation ran"
