"""The measuring hold, from the side of a command that switches the server to measure it (`bench tune`,
`bench run`): taken before anything is switched, renewed while it runs, given back once production is where
the command leaves it (launcher/runtime/api/tune_hold.py keeps it in the control API).

A second tune or bench run on the same server exits 2 naming the first, unless the first ran on this host and
its pid is gone (killed, and the same command run again): then this one takes the hold over at once. A hold lost
while measuring (the control API was unreachable past its lapse, and another command took it) stops this one with
exit 1 before its next cell; a tune's journal keeps what was measured, and the same command resumes.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from launcher.errors import RuntimeFailure, UserError
from launcher.runtime.api.bodies import HoldAnswer
from launcher.runtime.api.control_client import SyncControlClient

TTL_S = 60.0  # a holder killed with SIGKILL keeps the others out for at most this long
RENEW_EVERY_S = TTL_S / 4


PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no process of this host has a pid above it


def is_pid(pid: object) -> bool:
    """Whether `pid` could be a process of this host: an int (not a bool) from 1 to PID_MAX. A control API may
    hand back anything it was given (2**40, -1, 0), and os.kill would raise OverflowError on some and signal a
    whole process group on others."""
    return isinstance(pid, int) and not isinstance(pid, bool) and 1 <= pid <= PID_MAX


def alive(pid: object) -> bool:
    """Whether a process of that pid exists here (one of another user's counts as alive); never for something
    that is no pid of this host."""
    if not is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError, OSError):
        return False
    return True


def holder_of(command: str, out: Path) -> str:
    """Who holds it, as a second command is told: `command` is "bench tune" or "bench run"."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{command} (pid {os.getpid()} on {socket.gethostname()}, --out {out}, started {started})"


class MeasureHold:
    def __init__(self, control: SyncControlClient, holder: str, say: Callable[..., None], ttl_s: float = TTL_S):
        self.control, self.holder, self.say, self.ttl_s = control, holder, say, ttl_s
        self.id: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> MeasureHold:
        here = {"host": socket.gethostname(), "pid": os.getpid()}
        answer = self.control.hold(self.holder, self.ttl_s, **here)
        gone = self._gone_holder(answer, here["host"])
        if gone is not None:
            self.say(f"the measuring hold belonged to pid {gone} on this host, which is no longer running: taken over")
            answer = self.control.hold(self.holder, self.ttl_s, take_over_pid=gone, **here)
        code = answer.code
        if code == 200 and answer.id is not None:
            self.id = answer.id
            self._renewer = threading.Thread(target=self._renew, name="measure-hold", daemon=True)
            self._renewer.start()
            return self
        if code == 409:
            raise UserError(f"another bench tune or bench run is measuring the server behind {self.control.url}: "
                            f"{answer.error}. Wait until it finishes; one that was killed keeps the hold for at "
                            f"most {self.ttl_s:.0f} s (nothing was switched)")
        if code == 404:
            self.say(f"the control API at {self.control.url} has no /hold (an older kit): a second tune or bench "
                     "run on this server is not kept out", style="yellow")
            return self
        if code in (401, 403):
            raise UserError(f"control API refused the measuring hold (HTTP {code}): {answer.error}; set KIT_CONTROL_TOKEN")
        raise RuntimeFailure(f"control API at {self.control.url} did not grant the measuring hold (HTTP {code}): "
                             f"{answer.error}")

    @staticmethod
    def _gone_holder(answer: HoldAnswer, host: str) -> int | None:
        """The pid of a refusing holder that ran on this host and is gone; None otherwise. A holder whose pid is no
        pid of this host (outside 1..PID_MAX) is not taken over: nothing here shows it gone, and its hold lapses by
        itself within its TTL once nobody renews it (a live holder that renews it keeps it, as it should)."""
        held = answer.tune_hold if answer.code == 409 else None
        if not isinstance(held, dict) or held.get("host") != host:
            return None
        pid = held.get("pid")
        return pid if is_pid(pid) and pid != os.getpid() and not alive(pid) else None

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                answer = self.control.hold(self.holder, self.ttl_s, self.id, host=socket.gethostname(),
                                           pid=os.getpid())
            except RuntimeFailure:
                continue  # unreachable for now: the hold lapses only after ttl_s without a renewal
            if answer.code == 409:
                self.lost = str(answer.error)
                return

    def check(self) -> None:
        """Before each cell: RuntimeFailure once the hold is lost."""
        if self.lost is not None:
            raise RuntimeFailure(f"this command lost its hold on the server ({self.lost}), so another tune or bench "
                                 "run may be measuring it; stopped. Run the same command again when that one ends")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.id is not None and self.lost is None:
            try:
                self.control.release(self.id)
            except RuntimeFailure:
                pass  # the hold lapses by itself
