"""Was the server the same one before and after a repeat? A restart mid-run invalidates its numbers."""

from __future__ import annotations

from typing import Any

import aiohttp

PROBE_ERRORS = (aiohttp.ClientError, TimeoutError, ValueError)  # a probe of a dead or restarting server


def restart_reasons(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    """Why a repeat cannot be trusted, judged from the server identity before and after it."""
    if after is None:
        return ["server unreachable right after the run (it died or restarted)"]
    if before is None:
        return ["server identity unknown before the run"]
    reasons = []
    b, a = before.get("start_time"), after.get("start_time")
    if b is not None and a is not None and b != a:
        reasons.append(f"server restarted during the run (/server_info start_time {b} -> {a})")
    b, a = before.get("restarts"), after.get("restarts")
    if isinstance(b, int) and isinstance(a, int) and a > b:
        reasons.append(f"server restarted during the run (control API restart count {b} -> {a})")
    b, a = before.get("pid"), after.get("pid")
    if b and a and b != a:
        reasons.append(f"server restarted during the run (server pid {b} -> {a})")
    return reasons


def is_simulated(info: dict[str, Any]) -> bool:
    """The stand-in marks its /server_info; a real SGLang never does."""
    states = info.get("internal_states") or [{}]
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    return bool(info.get("simulated") or first.get("simulated"))
