"""supervisord's XML-RPC API over its unix socket (never TCP)."""

from __future__ import annotations

import http.client
import xmlrpc.client
from pathlib import Path

from supervisor.xmlrpc import SupervisorTransport

from launcher.runtime.core.failures import SupervisorGone

PROGRAM = "sglang"  # supervisord's process state names are launcher/runtime/core/states.py's


class Supervisor:
    """Each call raises SupervisorGone when supervisord does not answer on the socket (refused, reset, the socket
    gone): the caller tells a dead supervisord from a fault it answered with."""

    def __init__(self, socket_path: Path):
        self._socket = socket_path
        self._url = f"unix://{socket_path}"

    def _call(self, method: str, *args: object):
        # A fresh transport per call: the proxy is used from several threads.
        proxy = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, self._url))
        try:
            return getattr(proxy.supervisor, method)(*args)
        except (ConnectionError, FileNotFoundError, http.client.HTTPException) as exc:
            why = {ConnectionRefusedError: "connection refused", FileNotFoundError: "its socket is gone"}.get(
                type(exc), type(exc).__name__)
            raise SupervisorGone(f"supervisord stopped answering on {self._socket} ({why})") from exc

    def info(self, name: str = PROGRAM) -> dict:
        return self._call("getProcessInfo", name)

    def _tolerant(self, method: str, name: str, benign: str) -> None:
        """startProcess returns at once (the health gate waits), stopProcess waits; an "already so" fault is fine."""
        try:
            self._call(method, name, method == "stopProcess")
        except xmlrpc.client.Fault as exc:
            if benign not in exc.faultString:
                raise

    def start(self, name: str = PROGRAM) -> None:
        self._tolerant("startProcess", name, "ALREADY_STARTED")

    def stop(self, name: str = PROGRAM) -> None:
        self._tolerant("stopProcess", name, "NOT_RUNNING")
