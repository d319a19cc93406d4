"""Whether the server exited since it was asked to start, from supervisord's process info.

supervisord's state name alone misses an exit: a server that crashes after `startsecs` is restarted
at once (EXITED -> STARTING within one of supervisord's ticks), and one that crashes sooner is
retried after a backoff of a second or more, so a poll every 0.2 s under load can see STARTING or
RUNNING every time. getProcessInfo also gives `pid`, `start` and `stop` (whole seconds): a pid
that changed, a later `start` (a respawn), or a later `stop` than before the start request all say
that a process exited since, whatever the state reads by then. The switch reads the pid it started
right after the start request, so a later pid is a restart even when no poll saw the exit itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.runtime.core.states import DEAD_STATES

EXITED_STATES = DEAD_STATES | {"BACKOFF"}  # BACKOFF: it exited before startsecs and waits to be retried


def _int(info: dict, key: str) -> int:
    value = info.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class ExitWatch:
    """Feed it getProcessInfo answers; `exited` says why the server is gone, or None while it is not."""

    stop_before: int = 0  # supervisord's `stop` before the start request (0: never stopped)
    pid: int = 0  # the first pid seen since
    start: int = 0  # that process's `start`
    reason: str | None = None  # once an exit is seen it stays seen

    @classmethod
    def before_start(cls, info: dict) -> ExitWatch:
        """Taken just before the start request: any later `stop` is an exit of what was started."""
        return cls(stop_before=_int(info, "stop"))

    @classmethod
    def running(cls, info: dict) -> ExitWatch:
        """For a server started earlier (a recovery): the first answer is the baseline."""
        w = cls(stop_before=_int(info, "stop"))
        w.exited(info)
        return w

    def exited(self, info: dict) -> str | None:
        if self.reason is None:
            self.reason = self._exit(info)
        return self.reason

    def _exit(self, info: dict) -> str | None:
        state = info.get("statename")
        pid, start, stop = _int(info, "pid"), _int(info, "start"), _int(info, "stop")
        why = info.get("spawnerr") or f"exit status {info.get('exitstatus')}"
        if state in EXITED_STATES:
            return f"{state}: {why}"
        if pid and not self.pid:
            self.pid, self.start = pid, start
        if pid and pid != self.pid:
            return f"pid {self.pid} exited and supervisord restarted it as pid {pid} ({why})"
        if self.start and start > self.start:
            return f"supervisord restarted it ({why})"
        if stop > self.stop_before:
            return f"stopped since the start request ({state}: {why})"
        return None
