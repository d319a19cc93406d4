"""Runtime state files in KIT_STATE_DIR: the committed plan, the boot request, the switch history."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from launcher import atomic
from launcher.settings import StatePaths


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def committed(sd: Path) -> dict | None:
    """The last plan that passed the health gate (full plan JSON)."""
    return read_json(StatePaths(sd).committed)


def commit(sd: Path, plan: dict) -> None:
    atomic.write_json(StatePaths(sd).committed, {"committed_at": time.time(), "plan": plan})


def append_history(sd: Path, entry: dict) -> None:
    atomic.append_line(StatePaths(sd).history, json.dumps(entry, sort_keys=True))


def history(sd: Path, last: int = 20) -> list[dict]:
    try:
        lines = StatePaths(sd).history.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines[-last:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def server_url(flags: list[str]) -> str:
    """Where the server listens, from its --host/--port flags (0.0.0.0 is reached on loopback)."""
    host, port = "127.0.0.1", "30000"
    for i, tok in enumerate(flags[:-1]):
        if tok == "--host":
            host = flags[i + 1]
        elif tok == "--port":
            port = flags[i + 1]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def tail(path: Path, lines: int = 50) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return data.splitlines()[-lines:]
