"""Runtime state files in KIT_STATE_DIR: the committed plan, the boot request, the switch history.

Written atomically (or as whole appended lines) with mode 0600, and read defensively: a damaged file
is reported and ignored, never a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from launcher import atomic, settings
from launcher.profiles.plan import Plan
from launcher.state_layout import StatePaths

STATE_FILE_MODE = 0o600
MAX_STATE_FILE_BYTES = 4 << 20
HISTORY_TAIL_BYTES = 256 << 10


class CommittedRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)
    committed_at: float
    plan: Plan


def read_json(path: Path) -> dict | None:
    """A JSON object from a regular file of bounded size, or None (absent, damaged, not a file)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_STATE_FILE_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def plan_or_none(data: object) -> Plan | None:
    """A stored plan when it has the shape the runtime relies on, else None."""
    try:
        return Plan.from_json(data)
    except ValidationError:
        return None


def rendered_plan(sd: Path) -> Plan | None:
    """The plan last rendered into the state dir (profile.json): what the server starts with."""
    return plan_or_none(read_json(StatePaths(sd).profile_json))


def committed(sd: Path) -> CommittedRecord | None:
    """The last plan that passed the health gate ({"committed_at", "plan"}); a damaged record is ignored
    with a warning on stderr, as if there were none."""
    path = StatePaths(sd).committed
    if not path.exists():
        return None
    data = read_json(path)
    try:
        return CommittedRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        print(f"warning: ignoring {path}: key '{where}': {first['msg']}; starting from PROFILE/SPEC", file=sys.stderr)
        return None


def commit(sd: Path, plan: Plan) -> None:
    atomic.write_json(StatePaths(sd).committed, {"committed_at": time.time(), "plan": plan.to_json()}, mode=STATE_FILE_MODE)


def append_history(sd: Path, entry: dict) -> None:
    atomic.append_line(StatePaths(sd).history, json.dumps(entry, sort_keys=True), mode=STATE_FILE_MODE)


def read_history(sd: Path, last: int = 20) -> tuple[list[dict], int]:
    """The last `last` entries of history.jsonl, and how many lines of its tail were skipped as broken
    (not UTF-8, not JSON, not an object)."""
    path = StatePaths(sd).history
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - HISTORY_TAIL_BYTES)
            fh.seek(start)
            data = fh.read()
    except (FileNotFoundError, IsADirectoryError):
        return [], 0
    except OSError:
        return [], 1
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line of the tail may start mid-line
    out: list[dict] = []
    skipped = 0
    for raw in lines:
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            skipped += 1
            continue
        if isinstance(entry, dict):
            out.append(entry)
        else:
            skipped += 1
    return out[-last:], skipped


def history(sd: Path, last: int = 20) -> list[dict]:
    return read_history(sd, last)[0]


def tail(path: Path, lines: int = 50) -> list[str]:
    """The log's last lines with every secret's value replaced: they reach the unauthenticated /status."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [redact(line) for line in data.splitlines()[-lines:]]


def redact(text: str) -> str:
    for value in settings.secret_values():
        text = text.replace(value, "<hidden>")
    return text
