"""supervisord's XML-RPC API over its unix socket (never TCP)."""

from __future__ import annotations

import xmlrpc.client
from pathlib import Path

from supervisor.xmlrpc import SupervisorTransport

PROGRAM = "sglang"
# supervisord's own process state names (supervisor/states.py)
LIVE_STATES = frozenset({"RUNNING", "STARTING", "BACKOFF"})
UP_STATES = frozenset({"RUNNING", "STARTING"})  # a process that may answer (STARTING: within startsecs)
DEAD_STATES = frozenset({"FATAL", "EXITED", "STOPPED", "UNKNOWN"})


class Supervisor:
    def __init__(self, socket_path: Path):
        self._url = f"unix://{socket_path}"

    def _proxy(self):
        # A fresh transport per call: the proxy is used from several threads.
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, self._url))

    def info(self, name: str = PROGRAM) -> dict:
        return self._proxy().supervisor.getProcessInfo(name)

    def _tolerant(self, method: str, name: str, benign: str) -> None:
        """startProcess returns at once (the health gate waits), stopProcess waits; an "already so" fault is fine."""
        try:
            getattr(self._proxy().supervisor, method)(name, method == "stopProcess")
        except xmlrpc.client.Fault as exc:
            if benign not in exc.faultString:
                raise

    def start(self, name: str = PROGRAM) -> None:
        self._tolerant("startProcess", name, "ALREADY_STARTED")

    def stop(self, name: str = PROGRAM) -> None:
        self._tolerant("stopProcess", name, "NOT_RUNNING")
