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
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from launcher import atomic, settings
from launcher.profiles.plan import Plan
from launcher.state_layout import StatePaths

STATE_FILE_MODE = 0o600
MAX_STATE_FILE_BYTES = 4 << 20
HISTORY_TAIL_BYTES = 256 << 10
MAX_HISTORY_LINE_BYTES = 64 << 10
M = TypeVar("M", bound=BaseModel)  # a quarter of the tail window


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


def read_record(path: Path, model: type[M]) -> M | None:
    """A state file as its model: None when absent, pydantic.ValidationError when there but damaged
    (unreadable, not JSON, the wrong shape); each caller decides what damage means."""
    if not path.exists() and not path.is_symlink():
        return None
    return model.model_validate(read_json(path))


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
    try:
        return read_record(path, CommittedRecord)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        print(f"warning: ignoring {path}: key '{where}': {first['msg']}; starting from PROFILE/SPEC", file=sys.stderr)
        return None


def commit(sd: Path, plan: Plan) -> None:
    atomic.write_json(StatePaths(sd).committed, {"committed_at": time.time(), "plan": plan.to_json()}, mode=STATE_FILE_MODE)


def append_history(sd: Path, entry: dict) -> None:
    """One line per entry, at most MAX_HISTORY_LINE_BYTES: a longer log tail is cut from its oldest lines
    (`log_tail_cut` says how many), so a reader's tail window always holds whole lines."""
    line = _history_line(entry)
    if len(line.encode()) > MAX_HISTORY_LINE_BYTES and entry.get("log_tail"):
        kept = list(entry["log_tail"])
        while kept and len(line.encode()) > MAX_HISTORY_LINE_BYTES:
            kept = kept[len(kept) // 4 + 1:]
            line = _history_line({**entry, "log_tail": kept, "log_tail_cut": len(entry["log_tail"]) - len(kept)})
    if len(line.encode()) > MAX_HISTORY_LINE_BYTES:  # still too long: keep what says what happened
        brief = {k: entry.get(k) for k in ("ts", "id", "from", "to", "outcome", "resolution", "durations")}
        line = _history_line({**brief, "error": str(entry.get("error"))[:1000], "entry_cut": True})
    atomic.append_line(StatePaths(sd).history, line, mode=STATE_FILE_MODE)


def _history_line(entry: dict) -> str:
    return json.dumps(entry, sort_keys=True, ensure_ascii=False)


def read_history(sd: Path, last: int = 20) -> tuple[list[dict], int]:
    """The last `last` entries of history.jsonl, and how many lines of its tail were skipped as broken
    (not UTF-8, not JSON, not an object, or longer than the tail window). A history that is not a
    regular file (a FIFO, a device) reads as empty with one skip, and never blocks."""
    path = StatePaths(sd).history
    try:
        data, start = atomic.read_tail(path, HISTORY_TAIL_BYTES)
    except FileNotFoundError:
        return [], 0
    except OSError:
        return [], 1
    lines = data.split(b"\n")
    skipped = 0
    if start > 0:
        lines = lines[1:]  # the first line of the tail may start mid-line
        if not any(raw.strip() for raw in lines):
            skipped = 1  # one line longer than the whole window: count it, never hide it
    out: list[dict] = []
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


def history_has(sd: Path, entry_id: str) -> bool:
    """Whether the history's tail already holds an entry with this id (a switch whose journal outlived it)."""
    return any(e.get("id") == entry_id for e in read_history(sd, 10**6)[0])


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
