"""The switch journal: the intent of a switch, durable before the server is touched.

Written (and fsynced) before the old server is stopped and updated at every phase; removed once the
outcome is in the history. A journal found when the control API starts means a switch was cut short
(the control API crashed or the container restarted): the control API resolves it before anything
else (lifecycle.Lifecycle.recover).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from launcher import atomic
from launcher.runtime.core.states import Outcome, Phase
from launcher.runtime.records import state as runtime_state
from launcher.runtime.records.history import Label
from launcher.runtime.records.state import STATE_FILE_MODE
from launcher.state_layout import StatePaths

JOURNAL_CAP = 1 << 20  # switch.json's cap: an id, times, a phase and two plan labels
DONE = "done"  # the switch finished, but its outcome could not be appended to the history
UNKNOWN = "unknown"  # the journal was damaged: a switch was cut short somewhere
JournalPhase = Phase | Literal["done", "unknown"]


class Journal(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    id: str
    started_at: float
    updated_at: float
    phase: JournalPhase
    finished_as: Outcome | None = None  # with phase "done": the outcome it finished with
    from_: Label | None = Field(default=None, alias="from")
    to: Label | None = None
    cut_short: str | None = None  # why this process stopped the switch midway (supervisord stopped answering)

    @model_validator(mode="before")
    @classmethod
    def _string_done(cls, data: object) -> object:
        """Journals once wrote a finished switch's phase as the string "done:<outcome>"."""
        if isinstance(data, dict) and isinstance(data.get("phase"), str) and data["phase"].startswith("done:"):
            data = {**data, "phase": DONE, "finished_as": data["phase"][5:]}
        return data

    def phase_text(self) -> str:
        """The phase as the history's `interrupted_phase` names it ("done:<outcome>" for a finished one)."""
        return f"{DONE}:{self.finished_as}" if self.phase == DONE else str(self.phase)

    def record(self) -> dict:
        data = self.model_dump(mode="json", by_alias=True)
        for key in ("finished_as", "cut_short"):
            if data.get(key) is None:
                data.pop(key, None)
        for side in ("from", "to"):  # a label without a point reads as it did before points
            if isinstance(data.get(side), dict) and data[side].get("spec_params") is None:
                data[side].pop("spec_params")
        return data


def begin(sd: Path, from_: Label | None, to: Label, phase: Phase = Phase.DRAINING) -> Journal:
    """Write the intent; an OSError here means nothing was changed yet."""
    set_aside(sd)
    now = time.time()
    j = Journal(id=uuid.uuid4().hex[:12], started_at=now, updated_at=now, phase=phase,
                **{"from": from_, "to": to})
    _write(sd, j)
    return j


def advance(sd: Path, j: Journal, phase: Phase) -> None:
    j.phase, j.updated_at = Phase(phase), time.time()
    _write(sd, j)


def finished(sd: Path, j: Journal, outcome: Outcome) -> None:
    """The switch ended with `outcome` but the history could not take it: the next start records it."""
    j.phase, j.finished_as, j.updated_at = DONE, outcome, time.time()
    _write(sd, j)


def cut_short(sd: Path, j: Journal, why: str) -> None:
    """The switch stopped midway for a reason the next start should name (supervisord stopped answering): the
    journal stays, in the phase it reached, for the next start to resolve and record as `interrupted`."""
    j.cut_short, j.updated_at = why, time.time()
    _write(sd, j)


def _write(sd: Path, j: Journal) -> None:
    atomic.write_json(StatePaths(sd).journal, j.record(), mode=STATE_FILE_MODE)


def read(sd: Path) -> Journal | None:
    """The unfinished switch, if any. A damaged journal (no regular file, over JOURNAL_CAP, not JSON, not of the
    shape) still says that a switch was cut short; the damage is logged once (state.report)."""
    try:
        return runtime_state.load(StatePaths(sd).journal, Journal, JOURNAL_CAP)
    except runtime_state.Damaged as exc:
        runtime_state.report(exc, "resolved as a switch cut short")
        now = time.time()
        return Journal(id=f"damaged-{uuid.uuid4().hex[:6]}", started_at=now, updated_at=now, phase=UNKNOWN)


def clear(sd: Path) -> None:
    """The switch is recorded: remove its journal (set aside when something other than a file took its place)."""
    if not set_aside(sd):
        atomic.remove(StatePaths(sd).journal)


def set_aside(sd: Path) -> Path | None:
    """Rename a journal path that is not a regular file (a directory, a FIFO) to a dated name, so it is
    resolved once and never blocks the next switch; the new name, or None when there was nothing to move."""
    path = StatePaths(sd).journal
    if not path.exists() and not path.is_symlink() or path.is_file() and not path.is_symlink():
        return None
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
    path.rename(aside)
    atomic.fsync_dir(path.parent)
    return aside
