"""The tune hold: at most one `bench tune` measures a server at a time.

A tune takes the hold through the control API (POST /hold) before it measures anything, renews it while
it runs and gives it back at the end (DELETE /hold). A second tune is refused (HTTP 409) with the
first one's description. The hold lapses `ttl_s` after its last renewal, so a tune killed with SIGKILL
keeps nobody out for longer than that, and a tune on the same host that finds the holder's pid gone (the
same command run again after a kill) takes it over at once. It is kept in the state dir (written atomically, read
defensively: a damaged file holds nothing), so a control API restart does not let a second tune in.

Every number is bounded where it comes in: `ttl_s` in [TTL_MIN_S, TTL_MAX_S], a pid in [1, PID_MAX] (the
kernel's largest pid), and a file whose times are not finite, or whose hold would run longer than any grant
could make it (past TTL_MAX_S from now), is damaged: it holds nothing.

The hold keeps tunes apart; it does not lock production: a switch by an operator still runs (the tune
sees it and measures the disturbed cell again).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from launcher import atomic
from launcher.runtime.records import state as runtime_state
from launcher.state_layout import StatePaths

TTL_MIN_S = 1.0
TTL_MAX_S = 3600.0
HOLDER_MAX = 500
HOST_MAX = 255
ID_MAX = 64
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT (4194304): no pid is larger on any Linux host
CLOCK_SLACK_S = 60.0  # a kept hold may look this much further off than a grant makes it (the clock stepped back)
HOLD_FILE_CAP = 16 << 10  # tune-hold.json's cap: a holder, a host and four numbers
Pid = Annotated[int, Field(strict=True, ge=1, le=PID_MAX)]
Seconds = Annotated[float, Field(allow_inf_nan=False)]


class Hold(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: Annotated[str, Field(max_length=ID_MAX)]
    holder: Annotated[str, Field(max_length=HOLDER_MAX)]
    since: Seconds
    expires_at: Seconds
    host: Annotated[str | None, Field(max_length=HOST_MAX)] = None  # where the holder runs, and its pid there:
    pid: Pid | None = None  # what a take-over names

    def view(self, now: float) -> dict:
        """What /status and a refusal show: never the id (it is what lets a holder renew and release)."""
        return {"holder": self.holder, "host": self.host, "pid": self.pid, "since": self.since,
                "expires_in_s": round(max(0.0, self.expires_at - now), 1)}


class Held(Exception):
    """Another holder has it (or the hold named was lost)."""

    def __init__(self, current: Hold, now: float):
        self.current, self.now = current, now
        super().__init__(f"held by {current.holder} (for {now - current.since:.0f} s; it lapses in "
                         f"{max(0.0, current.expires_at - now):.0f} s unless renewed)")


def current(sd: Path, now: float | None = None) -> Hold | None:
    """The hold in force: None when there is none, it lapsed, or its file is damaged."""
    now = time.time() if now is None else now

    def granted(hold: Hold) -> str | None:
        if hold.expires_at > now + TTL_MAX_S + CLOCK_SLACK_S:
            return f"expires_at {hold.expires_at:.6g} is more than the longest grant ({TTL_MAX_S:.0f} s) from now"
        if hold.since > now + CLOCK_SLACK_S:
            return f"since {hold.since:.6g} is in the future"
        return None

    hold = runtime_state.read_record(StatePaths(sd).tune_hold, Hold, HOLD_FILE_CAP, "no tune hold is in force", granted)
    return hold if hold is not None and hold.expires_at > now else None


def take(sd: Path, holder: str, ttl_s: float, hold_id: str | None = None, now: float | None = None, *,
         host: str | None = None, pid: int | None = None, take_over_pid: int | None = None) -> Hold:
    """A new hold (hold_id None) or the renewal of `hold_id`; Held when another one is in force, or when
    `hold_id` is not the one in force (it lapsed and someone else took it, or it was never granted).
    `take_over_pid`: the caller, on `host`, found that pid gone; a hold of that host and pid is replaced."""
    now = time.time() if now is None else now
    held = current(sd, now)
    taken_over = (held is not None and take_over_pid is not None and host is not None
                  and (held.host, held.pid) == (host, take_over_pid))
    if held is not None and held.id != hold_id and not taken_over:
        raise Held(held, now)
    if taken_over:
        held = None
    if hold_id is not None and held is None:
        raise Held(Hold(id="", holder="nobody (the hold lapsed; take a new one)", since=now, expires_at=now), now)
    hold = Hold(id=hold_id or secrets.token_hex(16), holder=holder, since=held.since if held else now,
                expires_at=now + ttl_s, host=host, pid=pid)
    atomic.write_json(StatePaths(sd).tune_hold, hold.model_dump(), mode=runtime_state.STATE_FILE_MODE)
    return hold


def release(sd: Path, hold_id: str, now: float | None = None) -> bool:
    """Give the hold back; False (nothing changed) when `hold_id` is not the one in force."""
    held = current(sd, now)
    if held is None or held.id != hold_id:
        return False
    atomic.remove(StatePaths(sd).tune_hold)
    return True
