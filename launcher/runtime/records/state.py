"""Runtime state files in KIT_STATE_DIR: the committed plan, the boot request, the switch history, and the one
reader of every state file.

Written atomically (or as whole appended lines) with mode 0600, and read defensively through `load` /
`read_record`: a regular file only (opened with O_NOFOLLOW and O_NONBLOCK, so a symbolic link, a FIFO, a device
or a directory in its place is never followed and never blocks), of at most a cap per kind of file, strict JSON
(UTF-8; no NaN, no Infinity, no number that overflows a float) parsed into its model. Anything else is damage:
the file reads as absent, with one log line naming it and why (once, until the damage changes), never a crash.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from launcher import atomic, settings, strict_json
from launcher.profiles.plan import ADAPTIVE_CONFIG_FLAG, Plan
from launcher.runtime import log
from launcher.runtime.records.history import Entry
from launcher.state_layout import StatePaths

STATE_FILE_MODE = 0o600
MAX_STATE_FILE_BYTES = 4 << 20  # a JSON record's cap: a plan with its env is KiBs; the rest is far smaller
HISTORY_TAIL_BYTES = 256 << 10
MAX_HISTORY_LINE_BYTES = 64 << 10  # a quarter of the tail window
M = TypeVar("M", bound=BaseModel)


class CommittedRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)
    committed_at: float
    plan: Plan


class Damaged(ValueError):
    """A state file that is there but cannot be taken as its kind: `why` says what it is instead."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


def parse_json(data: bytes) -> object:
    """Strict JSON from bytes: UTF-8, no NaN/Infinity, every number finite; ValueError saying what is wrong."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=strict_json.refuse_constant,
                          parse_float=strict_json.finite)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except RecursionError:
        raise ValueError("nested too deep") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def read_bytes(path: Path, cap: int = MAX_STATE_FILE_BYTES) -> bytes | None:
    """A state file's bytes: None when absent; Damaged when it is no regular file, larger than `cap`, or unreadable."""
    try:
        return atomic.read_capped(path, cap)
    except FileNotFoundError:
        return None
    except (atomic.NotRegular, atomic.TooLarge) as exc:
        raise Damaged(path, str(exc).removeprefix(f"{path} ")) from None
    except OSError as exc:
        raise Damaged(path, f"unreadable ({exc.strerror or exc})") from None


def where(exc: ValidationError) -> str:
    """The first problem pydantic found, as a log line names it: key 'a.b': message."""
    first = exc.errors()[0]
    key = ".".join(str(x) for x in first["loc"]) or "(top level)"
    return f"key '{key}': {first['msg']}"


def load(path: Path, model: type[M] | None = None, cap: int = MAX_STATE_FILE_BYTES) -> M | object | None:
    """A state file as `model` (as parsed JSON without one): None when absent, Damaged when it is there but is no
    regular file, is over `cap`, is not strict JSON or is not of the model's shape."""
    data = read_bytes(path, cap)
    if data is None:
        return None
    try:
        parsed = parse_json(data)
        return parsed if model is None else model.model_validate(parsed)
    except ValidationError as exc:
        raise Damaged(path, where(exc)) from None
    except ValueError as exc:
        raise Damaged(path, str(exc)) from None


_reported: dict[str, str] = {}  # path -> the damage last logged for it: one line per damage, not one per read


def report(damage: Damaged, then: str = "") -> None:
    """The one log line for a damaged state file (once until the damage changes or the file reads well again)."""
    key = str(damage.path)
    if _reported.get(key) == damage.why:
        return
    _reported[key] = damage.why
    log.line(f"warning: ignoring {damage}" + (f"; {then}" if then else ""))


def _read_well(path: Path) -> None:
    _reported.pop(str(path), None)


def read_record(path: Path, model: type[M], cap: int = MAX_STATE_FILE_BYTES, then: str = "",
                check: Callable[[M], str | None] | None = None) -> M | None:
    """A state file as its model; None when absent or damaged (the damage logged once: `report`, with `then`, what
    happens instead). `check`: what the model cannot say (a time against the clock): why the record is damaged, or
    None when it is not."""
    try:
        out = load(path, model, cap)
        why = check(out) if check is not None and out is not None else None
        if why is not None:
            raise Damaged(path, why)
    except Damaged as exc:
        report(exc, then)
        return None
    _read_well(path)
    return out


def read_json(path: Path, cap: int = MAX_STATE_FILE_BYTES, then: str = "") -> dict | None:
    """A JSON object from a state file, or None (absent; damaged or not an object, logged once)."""
    try:
        data = load(path, None, cap)
        if data is not None and not isinstance(data, dict):
            raise Damaged(path, f"a JSON {type(data).__name__}, not an object")
    except Damaged as exc:
        report(exc, then)
        return None
    _read_well(path)
    return data


def rendered_plan(sd: Path) -> Plan | None:
    """The plan last rendered into the state dir (profile.json): what the server starts with."""
    return read_record(StatePaths(sd).profile_json, Plan)


def committed(sd: Path) -> CommittedRecord | None:
    """The last plan that passed the health gate ({"committed_at", "plan"}); a damaged record is ignored
    with a warning on stderr, as if there were none."""
    return read_record(StatePaths(sd).committed, CommittedRecord, then="starting from PROFILE/SPEC")


def commit(sd: Path, plan: Plan) -> None:
    atomic.write_json(StatePaths(sd).committed, {"committed_at": time.time(), "plan": plan.to_json()}, mode=STATE_FILE_MODE)


def append_history(sd: Path, entry: Entry | dict) -> None:
    """One line per entry, at most MAX_HISTORY_LINE_BYTES: a longer log tail is cut from its oldest lines
    (`log_tail_cut` says how many), so a reader's tail window always holds whole lines."""
    if isinstance(entry, Entry):
        entry = entry.to_json()
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
    return json.dumps(finite(entry), sort_keys=True, ensure_ascii=False, allow_nan=False)


def finite(data: object) -> object:
    """`data` with every NaN or infinite float replaced by None: what a JSON answer or a history line may carry
    (json.dumps would write NaN/Infinity, which is not JSON)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


def history_refusal(sd: Path) -> str | None:
    """Why history.jsonl cannot take an entry now (a symbolic link, a FIFO, a directory in its place: an append
    never follows or blocks on one, atomic.append_line), or None when it can (a regular file, or none yet). A switch
    checks it before it touches the server: one whose outcome could not be recorded is not begun."""
    path = StatePaths(sd).history
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror or exc})"
    return None if stat.S_ISREG(st.st_mode) else f"{path} is {atomic.kind(st.st_mode)}, not a regular file"


def read_history(sd: Path, last: int = 20) -> tuple[list[Entry], int]:
    """The last `last` entries of history.jsonl, and how many lines of its tail were skipped as broken
    (not UTF-8, not JSON, not an object of an entry's shape, or longer than the tail window). A history that is not a
    regular file (a symbolic link, a FIFO, a device) reads as empty with one skip (logged once), never followed
    and never blocking; a line with NaN, Infinity or an overflowing number is a broken line."""
    path = StatePaths(sd).history
    try:
        data, start = atomic.read_tail(path, HISTORY_TAIL_BYTES)
    except FileNotFoundError:
        _read_well(path)
        return [], 0
    except OSError as exc:
        report(Damaged(path, str(exc).removeprefix(f"{path} ") if isinstance(exc, atomic.NotRegular)
                       else f"unreadable ({exc.strerror or exc})"), "its history reads as empty")
        return [], 1
    _read_well(path)
    lines = data.split(b"\n")
    skipped = 0
    if start > 0:
        lines = lines[1:]  # the first line of the tail may start mid-line
        if not any(raw.strip() for raw in lines):
            skipped = 1  # one line longer than the whole window: count it, never hide it
    out: list[Entry] = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            out.append(Entry.model_validate(parse_json(raw)))
        except ValueError:  # ValidationError is one: not an object, or not an entry's shape
            skipped += 1
    return out[-last:], skipped


def history_has(sd: Path, entry_id: str) -> bool:
    """Whether the history's tail already holds an entry with this id (a switch whose journal outlived it)."""
    return any(e.id == entry_id for e in read_history(sd, 10**6)[0])


def history(sd: Path, last: int = 20) -> list[Entry]:
    return read_history(sd, last)[0]


ADAPTIVE_NAME = re.compile(r"[0-9a-f]{16}\.json")  # adaptive_tiers.AdaptiveTiers.path: <16 hex of its sha256>.json


def prune_adaptive(sd: Path, plans: Iterable[Plan | None]) -> list[str]:
    """Remove the tuned adaptive configs (KIT_STATE_DIR/adaptive/<sha>.json) that none of `plans` names (the running,
    the committed and the rendered plan: every one a start or a rollback may read); the names removed. Run under the
    switch lock, so no render writes one meanwhile; a config is rendered again with any plan that names it."""
    keep = set()
    for plan in plans:
        flags = list(plan.flags) if plan is not None else []
        if ADAPTIVE_CONFIG_FLAG in flags[:-1]:
            keep.add(Path(flags[flags.index(ADAPTIVE_CONFIG_FLAG) + 1]).name)
    folder = StatePaths(sd).adaptive
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    removed = []
    for e in entries:
        try:
            if ADAPTIVE_NAME.fullmatch(e.name) and e.name not in keep and not e.is_dir(follow_symlinks=False):
                os.unlink(e.path)
                removed.append(e.name)
        except OSError:
            continue
    if removed:
        atomic.fsync_dir(folder)
    return removed


def tail(path: Path, lines: int = 50) -> list[str]:
    """The log's last lines with every secret's value replaced: they reach the unauthenticated /status."""
    try:
        data = atomic.read_tail(path, 64 * 1024)[0].decode("utf-8", "replace")
    except OSError:  # absent, or no regular file (never followed, never blocking)
        return []
    return [redact(line) for line in data.splitlines()[-lines:]]


def redact(text: str) -> str:
    for value in settings.secret_values():
        text = text.replace(value, "<hidden>")
    return text
