"""Loopback ports for the test stack, the demo and the benchmark scripts."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
