"""Fakes for the runtime's unit tests (tests/launcher/runtime/test_switch.py, _lifecycle.py, _control_api.py):
a supervisord whose program starts, exits and is restarted on the test's say, and an HTTP server
(httpx.MockTransport) whose /health, /health_generate and /metrics answer what the test sets. No
process, no socket: a switch or a recovery runs in milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from launcher.profiles.plan import Plan, build_plan
from launcher.profiles.render import write_plan
from launcher.runtime.records import state as runtime_state
from launcher.runtime.switch import Switcher, Timeouts


def _free_pid_base() -> int:
    """Pids above the kernel's pid_max: no process group has them, so the switch's group wait ends at once."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1000
    except (OSError, ValueError):
        return 1 << 30


PID_BASE = _free_pid_base()


class FakeSupervisor:
    """supervisord's getProcessInfo/startProcess/stopProcess for one program, driven by the test.

    `start()` spawns (STARTING, a new pid, `start` = the fake clock's second); `crash()` ends it the way
    supervisord shows it (EXITED, or BACKOFF before startsecs), `respawn()` is supervisord's own restart.
    `on_start` / `on_info` let a test make the program die at start or between two polls."""

    def __init__(self, now: Callable[[], float] | None = None):
        self.t = 1_000_000.0
        self.now = now or (lambda: self.t)
        self.state = "STOPPED"
        self.pid = 0
        self.next_pid = PID_BASE
        self.start_at = 0
        self.stop_at = 0
        self.exitstatus = 0
        self.spawnerr = ""
        self.starts = 0
        self.stops = 0
        self.calls: list[str] = []
        self.on_start: Callable[[FakeSupervisor], None] | None = None
        self.on_info: Callable[[FakeSupervisor], None] | None = None
        self.fail_start: Exception | None = None

    def tick(self, seconds: float = 1.0) -> None:
        self.t += seconds

    def spawn(self) -> None:
        self.next_pid += 1
        self.pid, self.state, self.start_at = self.next_pid, "STARTING", int(self.now())
        self.starts += 1

    def crash(self, state: str = "EXITED", status: int = 1) -> None:
        self.pid, self.state, self.stop_at, self.exitstatus = 0, state, int(self.now()), status

    def respawn(self, after_s: float = 1.0) -> None:
        """supervisord restarts it: a second or more later, with a new pid (its STARTING is all a poll sees)."""
        self.tick(after_s)
        self.spawn()

    def run(self) -> None:
        self.state = "RUNNING"

    # -- the Supervisor interface --
    def info(self) -> dict:
        self.calls.append("info")
        if self.on_info:
            self.on_info(self)
        return {"statename": self.state, "pid": self.pid, "start": self.start_at, "stop": self.stop_at,
                "now": int(self.now()), "exitstatus": self.exitstatus, "spawnerr": self.spawnerr}

    def start(self) -> None:
        self.calls.append("start")
        if self.fail_start:
            raise self.fail_start
        if self.state not in ("RUNNING", "STARTING"):
            self.spawn()
            if self.on_start:
                self.on_start(self)

    def stop(self) -> None:
        self.calls.append("stop")
        self.stops += 1
        if self.pid:
            self.pid, self.state, self.stop_at = 0, "STOPPED", int(self.now())


class FakeServer:
    """What the SGLang server's HTTP endpoints answer, per URL port; a callable value is asked each time.

    `health`: status for /health and /health_generate, or an exception to raise (httpx.ConnectError for
    a refused connection). `metrics`: the number of running requests, an int status for an error answer,
    or an exception. `reads` counts /metrics reads."""

    def __init__(self, sup: FakeSupervisor | None = None):
        self.sup = sup
        self.health: object = 200
        self.metrics: object = 0
        self.reads = 0
        self.by_port: dict[int, dict] = {}

    def value(self, name: str, port: int) -> object:
        v = self.by_port.get(port, {}).get(name, getattr(self, name))
        return v() if callable(v) and not isinstance(v, type) else v

    def handler(self, request: httpx.Request) -> httpx.Response:
        port = request.url.port or 80
        if request.url.path in ("/health", "/health_generate"):
            if self.sup is not None and not self.sup.pid:
                raise httpx.ConnectError("refused", request=request)
            v = self.value("health", port)
            if isinstance(v, Exception):
                raise v
            return httpx.Response(int(v))
        if request.url.path == "/metrics":
            self.reads += 1
            v = self.value("metrics", port)
            if isinstance(v, Exception):
                raise v
            if isinstance(v, tuple):  # (status, body)
                return httpx.Response(v[0], text=v[1])
            if isinstance(v, int) and v >= 100:
                return httpx.Response(v, text="error")
            return httpx.Response(200, text=f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {v}\n")
        return httpx.Response(404)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


FAST = Timeouts(drain_s=0.3, stop_s=1.0, health_s=0.3, rollback_s=0.3)


def plan(profile: str = "baseline", spec: str = "off") -> Plan:
    return build_plan(profile, spec, None)


def switcher(sd: Path, sup: FakeSupervisor, server: FakeServer, timeouts: Timeouts = FAST) -> Switcher:
    return Switcher(sd, sup, timeouts, transport=server.transport(), poll_s=0.005)


def serving(sd: Path, p: Plan, sup: FakeSupervisor, commit: bool = True) -> None:
    """The state dir of a server that runs `p` (rendered, committed) under the fake supervisord."""
    sd.mkdir(parents=True, exist_ok=True)
    write_plan(sd, p)
    if commit:
        runtime_state.commit(sd, p)
    sup.spawn()
    sup.run()


def env(monkeypatch) -> None:
    """What a plan needs from the environment, and the stand-in's patch-free sglang."""
    for key in list(__import__("os").environ):
        if key.startswith(("KIT_", "NCCL_", "SGLANG_", "STANDIN_")) or key in ("PROFILE", "SPEC", "MODEL_OVERLAY"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MODEL_PATH", "/models/target")
    monkeypatch.setenv("DRAFT_MODEL_PATH", "/models/draft")
    monkeypatch.setenv("KIT_PATCH_CHECK", "skip")


TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def control_app(sd: Path, token: str, body):
    """Run `body(client, lifecycle, sup, server)` against the control API app over a state dir serving baseline,
    its monitor running on the fakes, once it reads serving."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from launcher.runtime.api import control_api
    from launcher.runtime.core.transitions import HEALTH_OK
    from launcher.runtime.lifecycle import Lifecycle

    sup = FakeSupervisor()
    server = FakeServer(sup)
    serving(sd, plan("baseline"), sup)
    sw = switcher(sd, sup, server)
    lc = Lifecycle(sd, supervisor=sup, switcher=sw, transport=server.transport())
    sw.follower = lc.follower

    async def go():
        async with TestClient(TestServer(control_api.make_app(sd, token, lifecycle=lc))) as client:
            for _ in range(400):  # the monitor's first ticks: serving
                if lc.state == "serving" and lc.health == HEALTH_OK:
                    break
                await asyncio.sleep(0.01)
            return await body(client, lc, sup, server)

    return asyncio.run(go())
