"""launcher/runtime/api/control_client.py against the real control API app (aiohttp on loopback, no supervisord)."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest
from aiohttp import web
from helpers_profiles import ENV

from launcher.errors import RuntimeFailure
from launcher.profiles import render
from launcher.profiles.plan import build_plan
from launcher.runtime.api.control_api import make_app
from launcher.runtime.api.control_client import ControlClient, SyncControlClient
from launcher.runtime.core.states import State
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
    assert status.profile == "baseline" and status.patch_check in ("enforce", "skip")
    assert status.state == State.STARTING and status.spec_params is None and status.history == []
    assert {"baseline", "fused", "custom-ar"} <= {p.name for p in profiles}
    assert specs == ["eagle3", "eagle3-adaptive", "ngram", "off"]
    assert plan.name == "baseline" and plan.digest() == status.digest and plan.argv[0]
    assert SyncControlClient(control).status().digest == status.digest


def test_switch_answers_carry_the_http_status(control):
    assert SyncControlClient(control, "wrong").switch("fused", "off", 5).code == 401
    answer = SyncControlClient(control, "sekrit").switch("warp-drive", "off", 5)
    assert answer.code == 400 and "unknown profile 'warp-drive'" in answer.error and answer.outcome is None
    # a body the server would refuse is refused the same way without being sent
    unsent = SyncControlClient(control, "sekrit").switch("fused", "off", 0)
    assert unsent.code == 400 and unsent.error.startswith("not sent, the control API refuses it: timeout_s: ")


def test_unreachable_api_is_a_runtime_failure_naming_the_url_and_a_failed_switch():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RuntimeFailure, match=f"control API at {url} is unreachable"):
        SyncControlClient(url, connect_timeout=1).status()
    answer = SyncControlClient(url, "t", connect_timeout=1).switch("fused", "off", 1)
    assert answer.code == 0 and answer.outcome == "failed" and url in answer.error and not answer.timed_out


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

    answer, status = asyncio.run(go())
    assert answer.code == 200 and answer.outcome == "switched" and state["posts"] == 2
    assert status.state == "serving"


def test_wait_idle_gives_the_last_status_when_time_runs_out(busy_api):
    url, _ = busy_api

    async def go():
        async with ControlClient(url) as c:
            return await c.wait_idle(0.3)

    assert asyncio.run(go()).state == "switching"


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

    ok, off, unknown, status, denied = asyncio.run(go())
    want = build_plan("baseline", "eagle3", environ=ENV, spec_params={"steps": 1, "topk": 1, "draft_tokens": 2})
    assert ok.code == 200 and ok.digest == want.digest() and ok.plan.spec_params.draft_tokens == 2
    assert ok.plan.digest() == want.digest()  # the plan parsed back is the plan the server built
    assert off.code == 400 and "EAGLE-3 only" in off.error
    assert unknown.code == 400 and "unknown profile 'warp-drive'" in unknown.error
    assert denied.code == 401
    assert status.profile == "baseline"  # nothing switched


def test_launcher_status_and_switch_read_the_typed_answers(control, capsys, monkeypatch):
    from launcher.runtime.api import control_cli

    assert control_cli.main(["status", "--url", control]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"baseline \+ off  state=starting  health=\S+  restarts=0  since \d{4}-\d\d-\d\dT\S+Z", line)
    assert control_cli.main(["status", "--url", control, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["profile"] == "baseline" and shown["history"] == [] and shown["events"] == []
    monkeypatch.setenv("KIT_CONTROL_TOKEN", "sekrit")
    assert control_cli.main(["switch", "warp-drive", "--spec", "off", "--url", control]) == 2
    assert "unknown profile 'warp-drive'" in capsys.readouterr().err
