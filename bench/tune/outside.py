"""Switches made by someone else while a cell was measured: such a cell is measured again, never recorded as
failed (its numbers belong to no one plan). Read from the control API's /status history: every switch
entry carries an id; one the tune did not make, appearing while a cell ran, was made from outside."""

from __future__ import annotations

from launcher.errors import RuntimeFailure
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import Outcome
from launcher.runtime.records.history import Entry

REMEASURE_MAX = 3  # then the tune stops (exit 1) and asks for the other party to stop; resuming measures it


async def switch_ids(control: ControlClient | None) -> set[str] | None:
    """The ids of the switches /status shows now; None when it cannot be read."""
    if control is None:
        return None
    try:
        history = (await control.status()).history
    except RuntimeFailure:
        return None
    return {e.id for e in history if e.id is not None}


async def since(control: ControlClient | None, known: set[str] | None, own: str | None,
                wait_s: float) -> list[Entry]:
    """Switch entries that appeared after `known` was read, other than the tune's own (`own`), that
    changed or tried to change the server (an aborted switch touched nothing). A switch still running is
    waited for (up to `wait_s`): its entry is written when it ends."""
    if known is None or control is None:
        return []
    try:
        history = (await control.wait_idle(wait_s)).history
    except RuntimeFailure:
        return []
    return [e for e in history if e.id is not None and e.id not in known and e.id != own
            and e.outcome != Outcome.ABORTED]


def describe(entries: list[Entry]) -> str:
    def label(e: Entry) -> str:
        to = e.to
        return f"switch {e.id} to {to.profile if to else None}+{to.spec if to else None}: {e.outcome}"

    return "; ".join(label(e) for e in entries)
