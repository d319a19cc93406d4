"""Loopback ports for the test stack, the demo and the benchmark scripts."""

from __future__ import annotations

import itertools
import os
import random
import socket
import subprocess
import threading
import time

import httpx

# Ports are handed out below the kernel's ephemeral range, so a port picked here is never taken meanwhile
# as the source port of some outgoing connection; each pytest-xdist worker draws from its own slice, so two
# workers never pick the same one, and each process walks its slice from a random start, so two separate
# runs on one host rarely meet. A port is handed out only when it can be bound at that moment.
LOWEST_PORT = 10000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_lock = threading.Lock()
_cursor: itertools.count | None = None


def _ephemeral_low() -> int:
    try:
        with open(EPHEMERAL_RANGE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default lower bound


def port_slice(worker: str | None, workers: str | None, low: int = LOWEST_PORT, high: int | None = None) -> range:
    """This process's slice of [low, high): the n-th of `workers` equal slices for xdist worker `gwN`."""
    high = _ephemeral_low() if high is None else high
    count = int(workers) if workers and workers.isdigit() and int(workers) > 0 else 1
    index = int(worker[2:]) if worker and worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (high - low) // count
    if size < 16:
        raise RuntimeError(f"no room for {count} port slices in [{low}, {high})")
    start = low + (index % count) * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, from this process's slice (see above)."""
    global _cursor
    ports = port_slice(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT"))
    with _lock:
        if _cursor is None:
            _cursor = itertools.count(random.randrange(len(ports)))
        for _ in range(len(ports)):
            port = ports[next(_cursor) % len(ports)]
            if _bindable(port):
                return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    """Poll `url`/health until 200; AssertionError when the process exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server at {url} exited with {proc.returncode}")
        time.sleep(0.05)
    raise AssertionError(f"server at {url} did not become healthy within {timeout:.0f} s")


def until(predicate, timeout: float, what: str = "condition"):
    """Poll `predicate` until it returns something truthy, and return that; HTTP and file errors
    while polling count as not yet. AssertionError naming `what` when time runs out."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout:.0f} s (last: {last})")


def ignore_http_errors(fn) -> None:
    """Call `fn`, dropping an HTTP error (a request whose server was killed under it)."""
    try:
        fn()
    except httpx.HTTPError:
        pass


class LoopbackHost:
    """A host of the tests on 127.0.0.1: its SGLang port and its control API port, and their URLs."""

    server_port: int
    control_port: int

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"
