"""Attacks on the fleet commands, each against the real parts: `launcher fleet switch|router|status` as
subprocesses, a real sglang-router started by `launcher fleet router`, and, where a host has to
misbehave in a way no real stack does, a small aiohttp host of this file's own on 127.0.0.1 (its
server answers /health, its control API answers /status but never answers /switch)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from helpers_profiles import REPO, run_launcher

from launcher.errors import UserError
from launcher.fleet import cli as fleet_cli
from launcher.fleet import fleetfile
from launcher.runtime.api import control_client
from launcher.runtime.api.control_client import SyncControlClient, switch_deadline_s
from testsupport.net import LoopbackHost, free_port
from testsupport.stack import FleetStack, stop_group

SMALL_BOUNDS = {"KIT_DRAIN_TIMEOUT_S": "1", "KIT_STOP_WAIT_S": "5", "KIT_HEALTH_TIMEOUT_S": "2",
                "KIT_ROLLBACK_TIMEOUT_S": "3"}


def wait_for(what: str, check: Callable[[], object], timeout: float = 60.0) -> object:
    """Poll until `check()` is truthy (the condition the product guarantees), else fail naming it."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


class HangingHost(LoopbackHost):
    """A host whose server is healthy and whose control API says `serving`, but never answers POST /switch."""

    token = "sekrit"

    def __init__(self) -> None:
        self.server_port, self.control_port = free_port(), free_port()
        self.switch_calls = 0
        self.loop = asyncio.new_event_loop()
        self.runners: list[web.AppRunner] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _ok(self, _request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _status(self, _request: web.Request) -> web.Response:
        return web.json_response({"profile": "baseline", "spec": "off", "state": "serving"})

    async def _switch(self, _request: web.Request) -> web.Response:
        self.switch_calls += 1
        await asyncio.sleep(3600)
        return web.json_response({"outcome": "switched"})

    async def _start(self) -> None:
        server = web.Application()
        server.router.add_get("/health", self._ok)
        server.router.add_get("/health_generate", self._ok)
        control = web.Application()
        control.router.add_get("/status", self._status)
        control.router.add_post("/switch", self._switch)
        for app, port in ((server, self.server_port), (control, self.control_port)):
            runner = web.AppRunner(app, shutdown_timeout=0.1)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)

    def start(self) -> HangingHost:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def stop(self) -> None:
        async def down() -> None:
            for runner in self.runners:
                await runner.cleanup()
            hung = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in hung:  # the /switch handlers still waiting
                t.cancel()
            await asyncio.gather(*hung, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def hanging(tmp_path) -> Iterator[tuple[FleetStack, HangingHost]]:
    host = HangingHost().start()
    (tmp_path / "fleet").mkdir()
    fleet = FleetStack(tmp_path / "fleet", [host]).start()  # type: ignore[list-item]  # duck-typed host
    yield fleet, host
    fleet.stop()
    host.stop()


def history(fleet: FleetStack) -> list[dict]:
    path = fleet.file.with_name("fleet.history.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def steps(fleet: FleetStack) -> list[tuple[str | None, str]]:
    return [(h["host"], h["step"]) for h in history(fleet)]


def healthy_in_router(fleet: FleetStack, server: str) -> bool:
    workers = httpx.get(f"{fleet.url}/workers", timeout=5).json()["workers"]
    return any(w["url"] == server and w["is_healthy"] for w in workers)


# 1. a host that never answers POST /switch


@pytest.mark.stack
def test_a_switch_that_never_answers_ends_at_the_timeout_and_the_host_goes_back(hanging):
    fleet, host = hanging
    t0 = time.monotonic()
    proc = fleet.cli("switch", "nccl-tuned", "--spec", "off", "--timeout", "5")
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert took < 25, f"--timeout 5 took {took:.0f} s"  # was 126 s: 5 + 120 per read
    assert host.switch_calls == 1 and "did not answer the switch within 5 s" in proc.stdout
    assert steps(fleet)[-4:] == [("host-0", "switching"), ("host-0", "switch_timed_out"),
                                 ("host-0", "restored_to_router"), (None, "stopped")]
    assert healthy_in_router(fleet, host.server_url)


@pytest.mark.stack
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_switch_without_timeout_puts_the_host_back(hanging, sig):
    """Without --timeout the wait is the switch's own worst case from the settings (recorded), and a
    SIGINT or SIGTERM while it waits puts the host back and records it before the CLI exits."""
    fleet, host = hanging
    env = {**fleet.env, **SMALL_BOUNDS}
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "fleet", "switch", "nccl-tuned", "--spec", "off", "--fleet", str(fleet.file)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        wait_for("the switch request reaches the host", lambda: host.switch_calls == 1)
        [switching] = [h for h in history(fleet) if h["step"] == "switching"]
        assert switching["deadline_s"] == switch_deadline_s(None, env) == 1 + 2 * (5 + 30) + 2 + 3 + 60
        assert not healthy_in_router(fleet, host.server_url)  # out while it switches
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_group(proc, 5)
    assert proc.returncode == 128 + sig, out + err
    assert f"interrupted by {sig.name}" in err
    assert steps(fleet)[-3:] == [("host-0", "interrupted"), ("host-0", "restored_to_router"), (None, "stopped")]
    assert history(fleet)[-1]["signal"] == sig
    assert healthy_in_router(fleet, host.server_url)


@pytest.mark.stack
def test_a_host_left_out_is_put_back_when_a_later_run_finds_it_on_the_plan(hanging):
    fleet, host = hanging
    with httpx.Client(timeout=5) as c:
        [w] = c.get(f"{fleet.url}/workers").json()["workers"]
        assert c.delete(f"{fleet.url}/workers/{w['id']}").status_code in (200, 202)
    wait_for("the router drops the host", lambda: not healthy_in_router(fleet, host.server_url))
    proc = fleet.cli("switch", "baseline", "--spec", "off")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert steps(fleet)[-3:] == [("host-0", "restored_to_router"), ("host-0", "skipped"), (None, "done")]
    assert healthy_in_router(fleet, host.server_url) and host.switch_calls == 0


def test_the_client_deadline_is_total_and_bounded_by_default(monkeypatch):
    """A server that trickles its answer a byte at a time never trips a per-read timeout; the deadline
    is on the whole call, and without one the client takes switch_deadline_s, never waits for ever."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        while True:
            await resp.write(b" ")
            await asyncio.sleep(0.2)

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/switch", trickle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        client = SyncControlClient(f"http://127.0.0.1:{port}", "t")
        t0 = time.monotonic()
        answer = client.switch("fused", "off", None, deadline_s=1.5)
        assert time.monotonic() - t0 < 5 and answer.code == 0 and answer.timed_out and answer.outcome == "failed"
        monkeypatch.setattr(control_client, "switch_deadline_s", lambda timeout_s: 1.0 + (timeout_s or 0))
        answer = client.switch("fused", "off", None)
        assert answer.timed_out and answer.deadline_s == 1.0
    finally:
        async def down() -> None:
            await runner.cleanup()
            hung = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in hung:  # the handler still trickling
                t.cancel()
            await asyncio.gather(*hung, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(down(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_the_default_deadline_follows_the_switch_settings():
    from launcher.runtime import switch

    assert control_client.STOP_MARGIN_S == switch.STOP_MARGIN_S
    assert switch_deadline_s() == 300 + 2 * (120 + 30) + 1800 + 1800 + 60  # the defaults: 71 min
    assert switch_deadline_s(7.0, SMALL_BOUNDS) == 1 + 2 * (5 + 30) + 7 + 3 + 60  # the request's own gate


@pytest.mark.stack
@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "3601", "five"])
def test_a_bad_timeout_is_refused_before_any_host_is_touched(tmp_path, raw):
    proc = run_launcher("fleet", "switch", "baseline", "--timeout", raw, "--fleet", str(tmp_path / "none.toml"))
    assert proc.returncode == 2 and "--timeout" in proc.stderr and "Traceback" not in proc.stderr


# 2. `launcher fleet router` restarted at once; the exporter's port and address


def _time_wait_on(port: int) -> None:
    """Leave a connection in TIME_WAIT on 127.0.0.1:port, as a router that just ended leaves them (its
    listener sets SO_REUSEADDR, as tokio's does; the connections it accepted inherit it)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the listening side closes first: its end waits in TIME_WAIT
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):  # what made the old pre-check refuse
        plain.bind(("127.0.0.1", port))


@pytest.mark.stack
def test_the_router_starts_at_once_on_a_port_with_connections_in_time_wait(tmp_path):
    host = HangingHost().start()
    try:
        fleet = FleetStack(tmp_path, [host])  # type: ignore[list-item]
        old = f":{fleet.router_port}\""
        fleet.router_port = free_port()
        fleet.file.write_text(fleet.file.read_text().replace(old, f":{fleet.router_port}\""))
        _time_wait_on(fleet.router_port)
        _time_wait_on(fleet.prom_port)
        fleet.start(timeout=30)
        fleet.stop()
    finally:
        host.stop()
    with socket.socket() as holder:  # a listener still refuses, in one line naming the key
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the port has TIME_WAIT of its own now
        holder.bind(("127.0.0.1", fleet.router_port))
        holder.listen()
        proc = run_launcher("fleet", "router", "--fleet", str(fleet.file))
    assert proc.returncode == 1 and "key 'router.url'" in proc.stderr and "is not free" in proc.stderr


def _fleet_file(tmp_path: Path, router: str, prometheus: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(f'[router]\nurl = "{router}"\nprometheus = "{prometheus}"\n\n[[host]]\nname = "a"\n'
                    'server = "http://127.0.0.1:30000"\ncontrol = "http://127.0.0.1:30100"\n')
    return path


@pytest.mark.stack
@pytest.mark.parametrize("prometheus", ["127.0.0.1:{p}", "0.0.0.0:{p}", "localhost:{p}"])
def test_the_exporter_on_the_router_port_is_refused(tmp_path, prometheus):
    port = free_port()
    path = _fleet_file(tmp_path, f"http://127.0.0.1:{port}", prometheus.format(p=port))
    proc = run_launcher("fleet", "router", "--fleet", str(path))
    assert proc.returncode == 2 and str(path) in proc.stderr and "router.prometheus" in proc.stderr, proc.stderr


@pytest.mark.stack
def test_an_ipv6_exporter_address_is_parsed_checked_and_passed_without_brackets(tmp_path):
    port = free_port()
    path = _fleet_file(tmp_path, f"http://127.0.0.1:{port}", f"[::1]:{port}")  # another address: allowed
    fleet = fleetfile.load(path)
    assert (fleet.router.prometheus_host, fleet.router.prometheus_port) == ("::1", port)
    printed = run_launcher("fleet", "router", "--print", "--fleet", str(path))
    assert printed.returncode == 0 and f"--prometheus-host ::1 --prometheus-port {port}" in printed.stdout
    fleet_cli._port_free("::1", port, "x")  # was: bind(('[::1]', p)) failed for any port
    with socket.socket(socket.AF_INET6) as holder:
        holder.bind(("::1", port))
        holder.listen()
        proc = run_launcher("fleet", "router", "--fleet", str(path))
    assert proc.returncode == 1 and "key 'router.prometheus'" in proc.stderr and "::1" in proc.stderr
    for bad in ("::1:29000", "[::1]29000", "[::1]:", "[::1]:0"):
        with pytest.raises(UserError, match="router.prometheus"):
            fleetfile.load(_fleet_file(tmp_path, "http://127.0.0.1:30080", bad))


# 3. URLs with credentials or port 0; a fleet file that is not a regular file


@pytest.mark.stack
@pytest.mark.parametrize(
    ("url", "needle"),
    [("http://user:pw@127.0.0.1:1", "credentials"), ("http://user@127.0.0.1:1", "credentials"),
     ("http://127.0.0.1:0", "port 0")],
)
@pytest.mark.parametrize("key", ["server", "control", "router"])
def test_urls_with_credentials_or_port_0_are_refused_naming_the_key(tmp_path, url, needle, key):
    path = _fleet_file(tmp_path, "http://127.0.0.1:30080", "127.0.0.1:29000")
    text = path.read_text()
    text = {"server": text.replace('server = "http://127.0.0.1:30000"', f'server = "{url}"'),
            "control": text.replace('control = "http://127.0.0.1:30100"', f'control = "{url}"'),
            "router": text.replace('url = "http://127.0.0.1:30080"', f'url = "{url}"')}[key]
    path.write_text(text)
    proc = run_launcher("fleet", "status", "--fleet", str(path))
    where = {"server": "host.0.server", "control": "host.0.control", "router": "router.url"}[key]
    assert proc.returncode == 2 and f"key '{where}'" in proc.stderr and needle in proc.stderr, proc.stderr
    assert "pw" not in proc.stderr  # the password is not echoed back


@pytest.mark.stack
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_fleet_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "fleet.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    proc = run_launcher("fleet", "status", "--fleet", str(path), timeout=30)
    assert proc.returncode == 2 and f"{path}: not a regular file" in proc.stderr, proc.stderr
