"""What the lifecycle decides besides the state move, pure: whether a reading saw a restart and how the crash
loop counts it, what the crash loop's error says, whether a program still restarting is stopped, which health
/status shows, what a recovery falls back to, which error a finished switch leaves, and a start's time.

lifecycle.py feeds these what it observed (supervisord's process info, /health, the plans' digests) and
carries out the answer; the state itself moves only through transitions.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.runtime.core.states import LIVE_STATES, Outcome

HEALTH_UNKNOWN = "unknown"


# ----- restarts and crash loops ----------------------------------------------------------------------
def restarted(last_pid: int, pid: int) -> bool:
    """A new pid after a known one: supervisord restarted the server (the kit's own start resets `last_pid` to 0)."""
    return bool(pid and last_pid and pid != last_pid)


def unhealthy_restarts(count: int, healthy: bool, restart: bool) -> int:
    """Restarts since /health last answered ok (the crash loop supervisord cannot see): 0 after a healthy
    answer, one more for a restart read without one."""
    return (0 if healthy else count) + (restart and not healthy)


def crash_loop_error(info: Mapping[str, object], unhealthy: int, start_retries: int, start_secs: int,
                     cause: str | None, backoff_s: float) -> str:
    """/status `last_error` of a crash loop: supervisord gave up (FATAL, with its reason), or the kit did because
    every start outlived KIT_START_SECS; the server log's word on why, and when the automatic restart comes."""
    if info.get("statename") == "FATAL":
        reason = info.get("spawnerr") or f"exit status {info.get('exitstatus')}"
        why = f"supervisord gave up after {start_retries} retries (FATAL, {reason}"
    else:  # each start outlived KIT_START_SECS, so supervisord would restart it for ever
        why = (f"restarted {unhealthy} times without a healthy answer; each start outlived "
               f"KIT_START_SECS={start_secs}s, so supervisord never gave up: the kit "
               f"stopped it (KIT_START_RETRIES={start_retries}")
    if cause:
        why += f"; the server log says: {cause}"
    return f"server crash loop: {why}); automatic restart in {backoff_s:.0f}s"


def stop_the_loop(starting: bool, statename: object) -> bool:
    """While the kit waits out the backoff, a program supervisord still restarts is stopped by the kit."""
    return not starting and statename in LIVE_STATES


# ----- what /status shows ----------------------------------------------------------------------------
def shown_health(health: str, health_at: float | None, server_changed_at: float) -> str:
    """The last /health reading, or "unknown" when none was taken of the server that runs now (none yet, or
    only of the one a switch stopped since)."""
    if health_at is None or health_at < server_changed_at:
        return HEALTH_UNKNOWN
    return health


def seconds_since_start(info: Mapping[str, object]) -> float | None:
    """supervisord's own clock: `now` less the program's `start` (whole seconds); None when either is missing."""
    start, now = info.get("start"), info.get("now")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (start, now)):
        return None
    return float(now - start) if now >= start else None


# ----- a recovery and a switch -----------------------------------------------------------------------
def has_other_good(good_digest: str | None, rendered_digest: str | None) -> bool:
    """A recovery whose running plan failed its gate rolls back only to a committed plan other than that one
    (any committed plan when the rendered one is unreadable)."""
    return good_digest is not None and (rendered_digest is None or good_digest != rendered_digest)


def switch_error(outcome: Outcome, error: str | None, rollback_error: str | None) -> str | None:
    """/status `last_error` after a switch: a failed switch's rollback error first (nothing answers), else its error."""
    return rollback_error or error if outcome == Outcome.FAILED else error
