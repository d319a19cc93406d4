"""supervisord's XML-RPC API over its unix socket (never TCP)."""

from __future__ import annotations

import xmlrpc.client
from pathlib import Path

from supervisor.xmlrpc import SupervisorTransport

PROGRAM = "sglang"


class Supervisor:
    def __init__(self, socket_path: Path):
        self._url = f"unix://{socket_path}"

    def _proxy(self):
        # A fresh transport per call: the proxy is used from several threads.
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, self._url))

    def info(self, name: str = PROGRAM) -> dict:
        return self._proxy().supervisor.getProcessInfo(name)

    def start(self, name: str = PROGRAM) -> None:
        try:
            self._proxy().supervisor.startProcess(name, False)
        except xmlrpc.client.Fault as exc:
            if "ALREADY_STARTED" not in exc.faultString:
                raise

    def stop(self, name: str = PROGRAM) -> None:
        try:
            self._proxy().supervisor.stopProcess(name, True)
        except xmlrpc.client.Fault as exc:
            if "NOT_RUNNING" not in exc.faultString:
                raise
