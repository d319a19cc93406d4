"""launcher/runtime/api/control_client.py against the real control API app (aiohttp on loopback, no supervisord)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web
from helpers_profiles import ENV

from launcher.errors import RuntimeFailure
from launcher.profiles import render
from launcher.profiles.plan import build_plan
from launcher.runtime.api.control_api import make_app
from launcher.runtime.api.control_client import ControlClient, SyncControlClient
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
    assert specs == ["eagle3", "eagle3-adaptive", "ngram", "off"]
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


@pytest.fixture
def busy_api():
    """A control API that holds a switch for a while: /status says switching, POST /switch answers 409,
    until `release` is set; then serving and 200."""
    state = {"release": threading.Event(), "posts": 0, "statuses": 0}

    async def status(_):
        state["statuses"] += 1
        return web.json_response({"state": "serving" if state["release"].is_set() else "switching"})

    async def switch(_):
        state["posts"] += 1
        if not state["release"].is_set():
            return web.json_response({"error": "another switch is running"}, status=409)
        return web.json_response({"outcome": "switched"})

    app = web.Application()
    app.router.add_get("/status", status)
    app.router.add_post("/switch", switch)
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", state
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_switch_when_idle_waits_out_another_switch(busy_api):
    url, state = busy_api

    async def go():
        async with ControlClient(url, "t") as c:
            task = asyncio.create_task(c.switch_when_idle("fused", "off", 5))
            while state["statuses"] < 3:  # it polls /status while the other switch holds the server
                await asyncio.sleep(0.01)
            assert not task.done() and state["posts"] == 1
            state["release"].set()
            return await task, await c.wait_idle(0)

    (code, body), status = asyncio.run(go())
    assert code == 200 and body["outcome"] == "switched" and state["posts"] == 2
    assert status["state"] == "serving"


def test_wait_idle_gives_the_last_status_when_time_runs_out(busy_api):
    url, _ = busy_api

    async def go():
        async with ControlClient(url) as c:
            return await c.wait_idle(0.3)

    assert asyncio.run(go())["state"] == "switching"


def test_check_validates_a_plan_as_a_switch_would_without_switching(control):
    async def go():
        async with ControlClient(control, "sekrit") as c:
            ok = await c.check("baseline", "eagle3", {"steps": 1, "topk": 1, "draft_tokens": 2})
            off = await c.check("baseline", "off", {"steps": 1, "topk": 1, "draft_tokens": 2})
            unknown = await c.check("warp-drive", "off")
            status = await c.status()
        async with ControlClient(control, "wrong") as c:
            denied = await c.check("fused", "off")
        return ok, off, unknown, status, denied

    (code, body), off, unknown, status, denied = asyncio.run(go())
    want = build_plan("baseline", "eagle3", environ=ENV, spec_params={"steps": 1, "topk": 1, "draft_tokens": 2})
    assert code == 200 and body["digest"] == want.digest() and body["plan"]["spec_params"]["draft_tokens"] == 2
    assert off[0] == 400 and "EAGLE-3 only" in off[1]["error"]
    assert unknown[0] == 400 and "unknown profile 'warp-drive'" in unknown[1]["error"]
    assert denied[0] == 401
    assert status["profile"] == "baseline"  # nothing switched
