"""A program of supervisord's ends when supervisord does: on Linux the kernel sends it SIGTERM when its parent
dies (prctl PR_SET_PDEATHSIG), so a supervisord killed with SIGKILL outside a container (where it is not
PID 1) leaves no control API acting on the next serve's supervisord, and no server holding the port.
SIGTERM is the signal each program already stops on in order (the control API's aiohttp runner, server_exec's
tree ending). Sources: docs/evidence.md, "Supervision"."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def tie_to_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask for `sig` when the parent dies; a parent already gone sends it now. False where the kernel has no
    such call (not Linux): nothing changes then."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the call took: nobody would send it
        os.kill(os.getpid(), sig)
    return True
