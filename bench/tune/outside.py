"""Switches made by someone else while a cell was measured: such a cell is measured again, never recorded as
failed (its numbers belong to no one plan). Read from the control API's /status history: every switch
entry carries an id; one the tune did not make, appearing while a cell ran, was made from outside."""

from __future__ import annotations

from typing import Any

from launcher.errors import RuntimeFailure
from launcher.runtime.api.control_client import ControlClient

REMEASURE_MAX = 3  # then the tune stops (exit 1) and asks for the other party to stop; resuming measures it


async def switch_ids(control: ControlClient | None) -> set[str] | None:
    """The ids of the switches /status shows now; None when it cannot be read."""
    if control is None:
        return None
    try:
        history = (await control.status()).get("history") or []
    except RuntimeFailure:
        return None
    return {e["id"] for e in history if isinstance(e, dict) and isinstance(e.get("id"), str)}


async def since(control: ControlClient | None, known: set[str] | None, own: str | None,
                wait_s: float) -> list[dict[str, Any]]:
    """Switch entries that appeared after `known` was read, other than the tune's own (`own`), that
    changed or tried to change the server (an aborted switch touched nothing). A switch still running is
    waited for (up to `wait_s`): its entry is written when it ends."""
    if known is None or control is None:
        return []
    try:
        history = (await control.wait_idle(wait_s)).get("history") or []
    except RuntimeFailure:
        return []
    return [e for e in history if isinstance(e, dict) and isinstance(e.get("id"), str)
            and e["id"] not in known and e["id"] != own and e.get("outcome") != "aborted"]


def describe(entries: list[dict[str, Any]]) -> str:
    def label(e: dict[str, Any]) -> str:
        to = e.get("to") or {}
        return f"switch {e.get('id')} to {to.get('profile')}+{to.get('spec')}: {e.get('outcome')}"

    return "; ".join(label(e) for e in entries)
