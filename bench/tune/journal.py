"""The tune journal: one JSON line per finished cell in OUT/journal.jsonl, so an interrupted tune
(SIGINT, SIGKILL, a reboot) resumes with the same command and measures nothing twice.

A line is written once a cell has finished, by one O_APPEND write with fsync (launcher.atomic
`append_line`): a cell killed mid-measurement leaves no line and runs again; a finished one is
never lost. Each line carries the candidate's label, the phase (`reference`: baseline's outputs the
gate compares with; `screen`; `final`: one interleaved slot) and round, its spec mode and EAGLE-3
point, the plan digest the server ran, the sha256 of the profile's file(s) (`profile_hash`), the
digest of the tune's measuring settings, its status, its repeats, and `detail`: the bench cell
record, its request rows, the plan and, on a cell's first finished measurement, its correctness pass
(`logprobs`: what the gate compares), so the bundle is rebuilt from the journal alone.

`resume()` reads the journal back:
- `ok` cells are reused: their repeats count toward the planner's results;
- `failed` cells (server failed or rolled back, invalid, or wrong by the correctness gate) are
  reused as failed, with their reason: never retried;
- a cell whose profile hash differs from the profile's file now (edited since) is invalidated, and
  so is one whose plan digest or settings digest differs from what this tune would run: both get
  measured again;
- a line that is not a whole JSON object of this shape (the torn last line of a kill mid-append,
  fused lines) is skipped and counted (`torn`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_serializer, model_validator

from bench import JsonObject
from bench.bundle.schema import Cell
from bench.client.request_record import RequestRecord
from bench.tune.objective import Repeat
from bench.tune.order import CellState
from launcher.atomic import append_line
from launcher.profiles.spec_params import SpecParams

JOURNAL = "journal.jsonl"
VERSION = 1
Status = Literal["ok", "failed"]
Phase = Literal["reference", "screen", "final"]
PHASES = ("reference", "screen", "final")


def profile_hash(paths: Iterable[str | Path]) -> str:
    """sha256 over the profile's files in order (its own file, or its whole `extends` chain)."""
    h = hashlib.sha256()
    for p in paths:
        data = Path(p).read_bytes()
        h.update(str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


def settings_digest(settings: Mapping[str, Any]) -> str:
    """The measuring settings (workload, concurrency, max tokens, …) that make repeats comparable."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class Detail(BaseModel):
    """What a journal entry keeps of its cell to rebuild the bundle: the cell's record, its request rows, the
    plan the server ran (as its control API reported it), its timings and, on the cell's first finished
    measurement, its correctness pass (bench/client/reply.py `Reply` rows, read back defensively by
    `Reply.from_json`). Keys this record does not know are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    cell: Cell | None = None
    rows: list[RequestRecord] = []
    plan: JsonObject | None = None
    wall_s: float | None = None
    measure_s: float | None = None
    logprobs: list[JsonObject] | None = None

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> JsonObject:
        data: JsonObject = handler(self)
        if data.get("logprobs") is None:  # only a cell's first finished measurement carries its pass
            data.pop("logprobs", None)
        return data


# the keys every journal line carries: a line without one of them is not a whole entry (a torn or fused line)
STORED = ("v", "label", "profile", "status", "plan_digest", "profile_hash", "settings_digest", "phase", "round",
          "reason", "repeats", "finished_at")


class Entry(BaseModel):
    """One finished cell, as one journal line (`to_json`) and back (`from_json`: the model's own validation)."""

    model_config = ConfigDict(frozen=True)
    label: str
    profile: str
    status: Status
    plan_digest: str
    profile_hash: str
    settings_digest: str
    phase: Phase = "screen"
    round: int = 0
    reason: str = ""
    repeats: tuple[Repeat, ...] = ()
    finished_at: float = 0.0
    spec: str = ""
    spec_params: SpecParams | None = None
    detail: Detail = Detail()
    v: Literal[1] = VERSION

    @model_validator(mode="before")
    @classmethod
    def _whole(cls, data: Any, info: ValidationInfo) -> Any:
        """A line read back must carry every stored key (`STORED`)."""
        if (info.context or {}).get("line") and isinstance(data, Mapping):
            missing = [k for k in STORED if k not in data]
            if missing:
                raise ValueError(f"not a whole journal entry (no {', '.join(missing)})")
        return data

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """One journal line's entry; ValueError (pydantic's ValidationError) on anything but a whole entry."""
        return cls.model_validate(data, context={"line": True})


def record(out_dir: str | Path, entry: Entry) -> Path:
    """Append one finished cell (stamped now when it has no time)."""
    if not entry.finished_at:
        entry = entry.model_copy(update={"finished_at": time.time()})
    path = Path(out_dir) / JOURNAL
    append_line(path, json.dumps(entry.to_json(), sort_keys=True, ensure_ascii=False))
    return path


@dataclass
class Resumed:
    entries: list[Entry] = field(default_factory=list)  # reusable: ok and failed
    invalidated: list[tuple[str, str]] = field(default_factory=list)  # (label, why)
    torn: int = 0

    def states(self, phases: Sequence[str] | None = ("reference", "screen")) -> dict[str, CellState]:
        """The planner's results: tok/s of every reused repeat of `phases` by label, or the failure (which
        sticks, whatever its phase)."""
        tokps: dict[str, list[float]] = {}
        failed: dict[str, str] = {}
        for e in self.entries:
            if phases is not None and e.phase not in phases and e.status == "ok":
                continue
            if e.status == "failed":
                failed.setdefault(e.label, e.reason or "failed")
            else:
                tokps.setdefault(e.label, []).extend(r.tokps for r in e.repeats)
        labels = [*tokps, *(k for k in failed if k not in tokps)]
        return {k: CellState(tuple(tokps.get(k, ())), failed.get(k)) for k in labels}

    def repeats(self, phase: str = "final") -> dict[str, list[Repeat]]:
        """Every reused repeat of `phase` by label, in journal order (the interleaved order for `final`)."""
        out: dict[str, list[Repeat]] = {}
        for e in self.entries:
            if e.phase == phase and e.status == "ok":
                out.setdefault(e.label, []).extend(e.repeats)
        return out

    def failed(self) -> dict[str, str]:
        return {e.label: e.reason or "failed" for e in self.entries if e.status == "failed"}


def resume(
    out_dir: str | Path,
    *,
    profile_hashes: Mapping[str, str],
    settings_digest: str,
    plan_digests: Mapping[str, str] | None = None,
) -> Resumed:
    """What the journal in `out_dir` lets this tune reuse (module docstring); empty when there is none.

    `profile_hashes`: profile -> `profile_hash` of its file(s) now; a profile not in it is not in this
    tune's space and its cells are invalidated. `plan_digests`: label -> plan digest this tune would
    run, where known."""
    out = Resumed()
    path = Path(out_dir) / JOURNAL
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return out
    for raw in lines:
        if not raw.strip():
            continue
        try:
            entry = Entry.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            out.torn += 1
            continue
        why = _stale(entry, profile_hashes, settings_digest, plan_digests or {})
        if why:
            out.invalidated.append((entry.label, why))
        else:
            out.entries.append(entry)
    return out


def _stale(entry: Entry, hashes: Mapping[str, str], settings: str, digests: Mapping[str, str]) -> str:
    if entry.profile not in hashes:
        return f"profile {entry.profile} is not in this tune"
    if entry.profile_hash != hashes[entry.profile]:
        return f"profile {entry.profile}'s file changed since it was measured"
    if entry.settings_digest != settings:
        return "measured with other settings"
    want = digests.get(entry.label)
    if want is not None and entry.plan_digest and entry.plan_digest != want:
        return f"plan digest {entry.plan_digest} is not the {want} this tune would run"
    return ""


def failed_entry(label: str, profile: str, reason: str, *, plan_digest: str, profile_hash: str,
                 settings_digest: str, phase: Phase = "screen", round: int = 0) -> Entry:
    """The line of a cell whose server failed, rolled back, or whose output failed the gate."""
    return Entry(label=label, profile=profile, status="failed", reason=reason, plan_digest=plan_digest,
                 profile_hash=profile_hash, settings_digest=settings_digest, phase=phase, round=round)


def ok_entry(label: str, profile: str, repeats: Sequence[Repeat], *, plan_digest: str, profile_hash: str,
             settings_digest: str, phase: Phase = "screen", round: int = 0) -> Entry:
    return Entry(label=label, profile=profile, status="ok", repeats=tuple(repeats), plan_digest=plan_digest,
                 profile_hash=profile_hash, settings_digest=settings_digest, phase=phase, round=round)
