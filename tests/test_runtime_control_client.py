"""launcher/runtime/control_client.py against the real control API app (aiohttp on loopback, no supervisord)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web
from helpers_profiles import ENV

from launcher.errors import RuntimeFailure
from launcher.profiles import render
from launcher.profiles.plan import build_plan
from launcher.runtime.control_api import make_app
from launcher.runtime.control_client import ControlClient, SyncControlClient
from testsupport.net import free_port


@pytest.fixture
def control(tmp_path, monkeypatch):
    """The control API over a state dir holding a rendered plan; its supervisord is absent (monitor idles)."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    render.write_plan(tmp_path, build_plan("baseline", "off", environ=ENV))
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(make_app(tmp_path, "sekrit"))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_reads_status_profiles_specs_and_the_running_plan(control):
    async def go():
        async with ControlClient(control) as c:
            return await c.status(), await c.profiles(), await c.spec_modes(), await c.running_plan()

    status, profiles, specs, plan = asyncio.run(go())
    assert status["profile"] == "baseline" and status["patch_check"] in ("enforce", "skip")
    assert {"baseline", "fused", "custom-ar"} <= {p["name"] for p in profiles}
    assert specs == ["eagle3", "ngram", "off"]
    assert plan["name"] == "baseline" and plan["digest"] == status["digest"] and plan["argv"][0]
    assert SyncControlClient(control).status()["digest"] == status["digest"]


def test_switch_answers_carry_the_http_status(control):
    assert SyncControlClient(control, "wrong").switch("fused", "off", 5)[0] == 401
    code, body = SyncControlClient(control, "sekrit").switch("warp-drive", "off", 5)
    assert code == 400 and "unknown profile 'warp-drive'" in body["error"]


def test_unreachable_api_is_a_runtime_failure_naming_the_url_and_a_failed_switch():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RuntimeFailure, match=f"control API at {url} is unreachable"):
        SyncControlClient(url, connect_timeout=1).status()
    code, body = SyncControlClient(url, "t", connect_timeout=1).switch("fused", "off", 1)
    assert code == 0 and body["outcome"] == "failed" and url in body["error"]
