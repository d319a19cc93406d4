"""`bench gate`: the correctness gate alone, between two real stand-in servers (SIMULATED mixture-of-experts
numerics: the reference itself moves between batch sizes), with its exit codes; and a bundle judged again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from testsupport.net import free_port, wait_healthy
from testsupport.stack import REPO

pytestmark = pytest.mark.stack
MOE = {"STANDIN_NUMERICS_MODEL": "moe", "STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TTFT_MS": "2", "STANDIN_DECODE_MS": "0.2"}
# 16 prompts x 128 tokens at concurrency 1 and 8
WORKLOAD = ("--num-prompts", "16", "--max-tokens", "128", "--concurrency", "1,8")


@contextmanager
def standin(**env: str) -> Iterator[str]:
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    proc = subprocess.Popen([sys.executable, "-m", "testsupport.standin", "--port", str(port)], cwd=REPO,
                            env={**base, "PYTHONPATH": str(REPO), **MOE, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def servers():
    with standin() as ref, standin(STANDIN_NUMERICS="reorder") as reorder, \
            standin(STANDIN_NUMERICS="corrupt") as corrupt, \
            standin(STANDIN_NUMERICS="reorder", STANDIN_CORRUPT_MIN_BATCH="8") as batch8, \
            standin(STANDIN_LOGPROBS="0") as mute:
        yield {"reference": ref, "reorder": reorder, "corrupt": corrupt, "batch8": batch8, "mute": mute}


def gate(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    return subprocess.run([sys.executable, "-m", "bench", "gate", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def verdict(servers, candidate: str, *extra: str) -> tuple[int, dict]:
    r = gate("--reference", servers["reference"], "--candidate", servers[candidate], *WORKLOAD, "--json", *extra)
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


def test_a_correct_moe_reordering_passes_though_the_old_constants_fail_it(servers):
    rc, v = verdict(servers, "reorder")
    assert (rc, v["status"]) == (0, "PASS"), v["reasons"]
    assert v["tolerance"]["basis"] == "null" and v["tolerance"]["null"]["label"] == "reference at concurrency 1 against 8"
    assert set(v["levels"]) == {"1", "8"}
    worst = max(lv["stats"]["max_delta"] for lv in v["levels"].values())
    assert worst > 0.33  # a routing flip: today's fixed 0.33-nat maximum would have failed a correct profile


def test_a_broken_reduction_fails_with_exit_1_naming_the_statistics(servers):
    rc, v = verdict(servers, "corrupt")
    assert (rc, v["status"]) == (1, "FAIL")
    assert any("mean log-probability change" in r for r in v["reasons"])


def test_a_fault_only_when_requests_share_a_forward_fails_at_concurrency_8_only(servers):
    rc, v = verdict(servers, "batch8")
    assert (rc, v["status"]) == (1, "FAIL")
    assert v["levels"]["1"]["status"] == "PASS" and v["levels"]["8"]["status"] == "FAIL"
    assert all(r.startswith("at concurrency 8: ") for r in v["reasons"])


def test_a_server_without_log_probabilities_is_not_enough_evidence_exit_3(servers):
    rc, v = verdict(servers, "mute")
    assert (rc, v["status"]) == (3, "not enough evidence")


def test_usage_errors_exit_2_and_ask_no_server(servers):
    small = gate("--reference", servers["reference"], "--candidate", servers["reorder"], "--num-prompts", "4",
                 "--max-tokens", "48")
    assert small.returncode == 2 and "--num-prompts 4 x --max-tokens 48" in small.stderr and "200" in small.stderr
    assert gate("--reference", servers["reference"]).returncode == 2
    both = gate("--bundle", "/nonexistent", "--reference", servers["reference"])
    assert both.returncode == 2 and "drop --reference" in both.stderr


def test_the_text_report_names_the_null_and_the_detection_limit(servers):
    r = gate("--reference", servers["reference"], "--candidate", servers["reorder"], *WORKLOAD)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "PASS" in r.stdout and "null: reference at concurrency 1 against 8" in r.stdout
    assert "detection limit:" in r.stdout and "concurrency 8: PASS" in r.stdout


def test_only_sglangs_generate_is_asked(servers, tmp_path):
    """A server that answers /generate alone (every other path 404, each one recorded): `bench gate` needs
    nothing else, so any SGLang-compatible server can be judged."""
    import asyncio
    import threading

    import aiohttp
    from aiohttp import web

    asked: list[str] = []
    upstream = servers["reorder"]

    async def handle(request: web.Request) -> web.Response:
        asked.append(f"{request.method} {request.path}")
        if request.path != "/generate":
            return web.Response(status=404)
        async with aiohttp.ClientSession() as s, s.post(f"{upstream}/generate", data=await request.read(),
                                                       headers={"Content-Type": "application/json"}) as r:
            return web.Response(status=r.status, body=await r.read(), content_type="application/json")

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        rc, v = verdict({**servers, "bare": f"http://127.0.0.1:{port}"}, "bare")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
    assert (rc, v["status"]) == (0, "PASS"), v["reasons"]
    # /server_info, then its deprecated 0.5.23 name, are asked once each to name the server; both 404 here
    assert set(asked) <= {"POST /generate", "GET /server_info", "GET /get_server_info"} and "POST /generate" in asked
    assert v["candidate"] == {"url": f"http://127.0.0.1:{port}"}  # no /server_info: judged all the same
