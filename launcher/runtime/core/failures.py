"""Why a step of a switch failed, as types: the switch and the recovery tell a dead server, a health
timeout and a drain cut short apart by these, never by the words of a message."""

from __future__ import annotations


class GateFailed(Exception):
    """A check the switch makes failed; the message says what and is written to the history as is."""


class ServerExited(GateFailed):
    """The server the health gate waited on exited (exits.ExitWatch says how supervisord showed it)."""


class HealthTimeout(GateFailed):
    """The server did not answer /health_generate 200 within the gate's time."""


class DrainCutShort(GateFailed):
    """The drain's deadline passed before /metrics showed no running request; `last` is the last reading."""

    def __init__(self, message: str, last: str):
        super().__init__(message)
        self.last = last


class SupervisorGone(Exception):
    """supervisord does not answer on its socket (killed, stopped, its socket gone): nothing the switch asks of it
    can be done, and a rollback through it cannot either. The switch is cut short (outcome `interrupted`)."""


def describe(exc: BaseException) -> str:
    """One line for the history: a gate failure and a supervisord gone say themselves, anything else names its type."""
    return str(exc) if isinstance(exc, GateFailed | SupervisorGone) else f"{type(exc).__name__}: {exc}"
