"""A real `launcher serve` (real supervisord, real control API) over the stand-in server, for tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

from testsupport.net import LoopbackHost, free_port

REPO = Path(__file__).resolve().parent.parent

FAULT_PROFILES = {
    "crashy": 'description = "test: server crashes at start"\nstatus = "experimental"\nextends = "baseline"\n'
    '[env]\nSTANDIN_FAULT = "crash_at_start"\n',
    "hangs": 'description = "test: server never becomes healthy"\nstatus = "experimental"\nextends = "baseline"\n'
    '[env]\nSTANDIN_FAULT = "hang_at_start"\n',
    "ipc-quiet": 'description = "test: healthy, but PCIe-IPC fell back to NCCL"\nstatus = "experimental"\n'
    'extends = "custom-ar"\n[env]\nSTANDIN_WITHHOLD_ACTIVATION = "pcie-ipc"\n',
    "fusion-quiet": 'description = "test: healthy, but fusion was given up"\nstatus = "experimental"\n'
    'extends = "fused"\n[env]\nSTANDIN_WITHHOLD_ACTIVATION = "fusion"\n',
    "mscclpp-quiet": 'description = "test: healthy, but MSCCL++ did not import"\nstatus = "experimental"\n'
    'extends = "mscclpp"\n[env]\nSTANDIN_WITHHOLD_ACTIVATION = "mscclpp"\n',
    "reordered": 'description = "test: a correct all-reduce in another order (rounding noise, texts differ)"\n'
    'status = "experimental"\nextends = "baseline"\n[env]\nSTANDIN_NUMERICS = "reorder"\n'
    'STANDIN_DECODE_MS = "6"\nSTANDIN_VERIFY_MS = "15"\n',
    "corrupt-fast": 'description = "test: the fastest profile, with a broken all-reduce"\nstatus = "experimental"\n'
    'extends = "baseline"\n[env]\nSTANDIN_NUMERICS = "corrupt"\nSTANDIN_DECODE_MS = "1"\nSTANDIN_VERIFY_MS = "2"\n',
    "no-logprobs": 'description = "test: a server that ignores requests for log-probabilities"\n'
    'status = "experimental"\nextends = "baseline"\n[env]\nSTANDIN_LOGPROBS = "0"\n',
}


PORT_CLASH = "address already in use"
PORT_TRIES = 3  # a clash is rare (net.free_port); a start that fails for any other reason is not retried


def port_clash(*places: Path) -> bool:
    """Whether a log file in `places` (files, or folders searched recursively) says a bind failed."""
    for place in places:
        files = [place] if place.is_file() else (place.rglob("*") if place.is_dir() else [])
        for f in files:
            if f.is_file():
                with contextlib.suppress(OSError):
                    with open(f, "rb") as fh:
                        if PORT_CLASH in fh.read(8 << 20).decode(errors="replace").lower():
                            return True
    return False


def stop_group(proc: subprocess.Popen | None, wait_s: float) -> None:
    """SIGTERM the process group a test started (start_new_session), SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=wait_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


class KitStack(LoopbackHost):
    def __init__(self, tmp: Path, profile: str = "baseline", spec: str = "off", extra_env: dict | None = None):
        self.tmp = tmp
        self.state_dir = tmp / "state"
        self.profiles_dir = tmp / "profiles"
        self.profiles_dir.mkdir(parents=True, exist_ok=True)
        for name, text in FAULT_PROFILES.items():
            (self.profiles_dir / f"{name}.toml").write_text(text)
        self.server_port, self.control_port = free_port(), free_port()
        self.token = "test-token"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "NCCL_", "SGLANG_", "STANDIN_"))},
            "MODEL_PATH": "/models/sim",
            "DRAFT_MODEL_PATH": "/models/draft",
            "KIT_SERVER_CMD": f"{sys.executable} -m testsupport.standin",
            "KIT_PATCH_CHECK": "skip",
            "KIT_SERVER_HOST": "127.0.0.1",
            "KIT_SERVER_PORT": str(self.server_port),
            "KIT_CONTROL_PORT": str(self.control_port),
            "KIT_STATE_DIR": str(self.state_dir),
            "KIT_CONTROL_TOKEN": self.token,
            "KIT_PROFILES_DIR": str(self.profiles_dir),
            "KIT_STOP_WAIT_S": "5",
            "KIT_START_SECS": "1",
            "KIT_START_RETRIES": "1",
            "KIT_HEALTH_TIMEOUT_S": "20",
            "KIT_DRAIN_TIMEOUT_S": "20",
            "STANDIN_STARTUP_DELAY_S": "0.3",
            "PYTHONPATH": str(REPO),
            "PROFILE": profile,
            "SPEC": spec,
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.log = tmp / "serve.log"

    def start(self, timeout: float = 90, states: frozenset[str] = frozenset({"serving"}), healthy: bool = True) -> KitStack:
        """Start `launcher serve` and wait until /status reads one of `states` (serving) and, when `healthy`,
        health ok (`timeout` is a ceiling:
        a loaded host takes long to import). When a port it was given turned out to be taken
        (another process bound it between free_port and the server), start again on fresh ports and a
        fresh state dir (the failed one is kept beside it), at most PORT_TRIES times in all."""
        for attempt in range(1, PORT_TRIES + 1):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "launcher", "serve"],
                cwd=REPO,
                env=self.env,
                stdout=open(self.log, "ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                self.wait_state(set(states), timeout, healthy=healthy)
                return self
            except AssertionError:
                if attempt == PORT_TRIES or not port_clash(self.log, self.state_dir):
                    raise
            self.stop()
            self.log.rename(self.tmp / f"serve.port-clash-{attempt}.log")
            shutil.move(self.state_dir, self.tmp / f"state.port-clash-{attempt}")
            self.server_port, self.control_port = free_port(), free_port()
            self.env.update(KIT_SERVER_PORT=str(self.server_port), KIT_CONTROL_PORT=str(self.control_port))
        raise AssertionError("unreachable")

    def status(self) -> dict:
        return httpx.get(f"{self.control_url}/status", timeout=5).json()

    def wait_state(self, states: set[str], timeout: float = 30, healthy: bool = True) -> dict:
        deadline = time.monotonic() + timeout
        last: dict | str = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                last = self.status()
                if last["state"] in states and (last["health"] == "ok" or not healthy):
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not {states} after {timeout}s: {last}\n{self.log.read_text()[-3000:]}")

    def check(self, profile: str, spec: str = "off") -> dict:
        """POST /check: the plan a switch would run, validated, nothing switched. The first one builds and
        caches the control API's SGLang parser, so a switch after it starts without that wait."""
        r = httpx.post(f"{self.control_url}/check", json={"profile": profile, "spec": spec},
                       headers={"Authorization": f"Bearer {self.token}"}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    def switch(self, profile: str, spec: str = "off", token: str | None = "default", timeout_s: float | None = None,
               spec_params: object = None) -> httpx.Response:
        """POST /switch; `spec_params` (an EAGLE point as a mapping, or anything to send as is) only when given."""
        headers = {}
        tok = self.token if token == "default" else token
        if tok is not None:
            headers["Authorization"] = f"Bearer {tok}"
        body: dict = {"profile": profile, "spec": spec, "timeout_s": timeout_s}
        if spec_params is not None:
            body["spec_params"] = spec_params
        return httpx.post(
            f"{self.control_url}/switch",
            json=body,
            headers=headers,
            timeout=120,
        )

    def history(self) -> list[dict]:
        """history.jsonl's entries (blank lines skipped)."""
        path = self.state_dir / "history.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def control_pid(self) -> int:
        """The control API's pid, found among serve's descendants."""
        assert self.proc is not None
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if "launcher.runtime.api.control_api" in " ".join(p.cmdline()):
                    return p.pid
            except psutil.NoSuchProcess:  # gone, or a zombie not yet reaped (ZombieProcess is one)
                continue
        raise AssertionError("no control API process")

    def debug_env(self) -> dict:
        return httpx.get(f"{self.server_url}/debug/env", timeout=5).json()

    def cli(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "launcher", *args],
            cwd=REPO,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )

    def stop(self) -> None:
        stop_group(self.proc, 30)


def start_all(stacks: list[KitStack], timeout: float = 60) -> list[KitStack]:
    """Start several stacks at once (each mostly waits on its own processes); the first failure is raised."""
    with ThreadPoolExecutor(max_workers=len(stacks) or 1) as pool:
        for done in [pool.submit(s.start, timeout) for s in stacks]:
            done.result()
    return stacks


def stop_all(stacks: list[KitStack]) -> None:
    """Stop several stacks at once: each stop mostly waits for its processes to end."""
    with ThreadPoolExecutor(max_workers=len(stacks) or 1) as pool:
        list(pool.map(KitStack.stop, stacks))


class FleetStack:
    """Several KitStacks on loopback behind a real sglang-router started by `launcher fleet router`."""

    def __init__(self, tmp: Path, stacks: list[KitStack]):
        self.tmp, self.stacks = tmp, stacks
        self.file = tmp / "fleet.toml"
        self.pick_ports()
        self.env = {**os.environ, "KIT_CONTROL_TOKEN": stacks[0].token, "PYTHONPATH": str(REPO)}
        self.proc: subprocess.Popen | None = None
        self.log = tmp / "router.log"

    def pick_ports(self) -> None:
        """Fresh router and Prometheus ports, written into the fleet file."""
        self.router_port, self.prom_port = free_port(), free_port()
        lines = [f'[router]\nurl = "http://127.0.0.1:{self.router_port}"\nprometheus = "127.0.0.1:{self.prom_port}"\n']
        for i, s in enumerate(self.stacks):
            lines.append(f'[[host]]\nname = "host-{i}"\nserver = "{s.server_url}"\ncontrol = "{s.control_url}"\n')
        self.file.write_text("\n".join(lines))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def start(self, timeout: float = 60) -> FleetStack:
        """Start the router and wait until every host is a healthy worker; on a port clash (see
        KitStack.start) start again on fresh ports, at most PORT_TRIES times in all."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                return self._start_once(timeout)
            except AssertionError:
                if attempt == PORT_TRIES or not port_clash(self.log):
                    raise
            self.stop()
            self.log.rename(self.tmp / f"router.port-clash-{attempt}.log")
            self.pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> FleetStack:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", "fleet", "router", "--fleet", str(self.file)],
            cwd=REPO, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"router exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                workers = httpx.get(f"{self.url}/workers", timeout=2).json().get("workers", [])
                if len([w for w in workers if w.get("is_healthy")]) == len(self.stacks):
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.3)
        raise AssertionError(f"router not ready with {len(self.stacks)} healthy workers: {self.log.read_text()[-2000:]}")

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "launcher", "fleet", *args, "--fleet", str(self.file)],
                              cwd=REPO, env=self.env, capture_output=True, text=True, timeout=600)

    def stop(self) -> None:
        stop_group(self.proc, 20)


@contextlib.contextmanager
def temporary_stack(extra_env: dict[str, str], timeout: float = 60) -> Iterator[KitStack]:
    """A started KitStack (baseline, off) in a folder that goes with it, its parser built (one /check), for
    the benchmark scripts: their first timed switch pays no import. Stopped after."""
    with tempfile.TemporaryDirectory() as tmp:
        stack = KitStack(Path(tmp), "baseline", "off", extra_env).start(timeout=timeout)
        try:
            stack.check("baseline")
            yield stack
        finally:
            stack.stop()


@contextlib.contextmanager
def standin_stack(tmp: Path, standin_config: dict, timeout: float = 60) -> Iterator[KitStack]:
    """A started KitStack (baseline, off) whose stand-in reads `standin_config` (STANDIN_CONFIG); stopped after."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "standin.json"
    config.write_text(json.dumps(standin_config))
    stack = KitStack(tmp / "stack", "baseline", "off", {"STANDIN_CONFIG": str(config)})
    try:
        yield stack.start(timeout=timeout)
    finally:
        stack.stop()
