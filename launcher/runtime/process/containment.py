"""Keep every process the server starts inside one boundary, and end them all together.

supervisord stops a program's process group; a process that calls setsid() leaves it and would
outlive a restart, a switch and `serve`'s SIGTERM while holding GPU memory and ports. Where the
cgroup v2 tree is writable, the server runs in a cgroup of its own and everything in it is killed.
Otherwise this process becomes a child subreaper (PR_SET_CHILD_SUBREAPER): orphaned descendants are
re-parented to it instead of init, so it can still find and end them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
CGROUP_ROOT = Path("/sys/fs/cgroup")


class Containment:
    """How the server's processes are held: `kind` is "cgroup" or "subreaper"."""

    def __init__(self, kind: str, cgroup: Path | None = None):
        self.kind = kind
        self.cgroup = cgroup

    @classmethod
    def enter(cls) -> Containment:
        """Put this process (and so its future children) in a fresh cgroup, else become a subreaper."""
        cgroup = _own_cgroup()
        if cgroup is not None:
            return cls("cgroup", cgroup)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
        return cls("subreaper")

    def members(self) -> list[psutil.Process]:
        """Every process held, except this one."""
        me = os.getpid()
        if self.cgroup is not None:
            try:
                pids = [int(x) for x in (self.cgroup / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pids = []
            out = []
            for pid in pids:
                if pid == me:
                    continue
                try:
                    out.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
            return out
        try:
            return psutil.Process(me).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def end_all(self, grace_s: float) -> int:
        """SIGTERM every member, SIGKILL what is left after `grace_s`; returns how many were killed."""
        procs = self.members()
        for p in procs:
            _signal(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=max(grace_s, 0))
        for p in alive:
            _signal(p, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.members() and time.monotonic() < deadline:
            for p in self.members():
                _signal(p, signal.SIGKILL)
            _reap()
            time.sleep(0.05)
        _reap()
        return len(procs)

    def release(self) -> None:
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:
                pass


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _reap() -> None:
    """Collect exited children (re-parented orphans too) so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _own_cgroup() -> Path | None:
    """A new cgroup v2 below this process's own, with this process moved in; None where not allowed."""
    try:
        if not (CGROUP_ROOT / "cgroup.controllers").is_file():
            return None
        line = next((ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")), None)
        if line is None:
            return None
        here = CGROUP_ROOT / line[3:].lstrip("/")
        target = here / f"kit-server-{os.getpid()}"
        target.mkdir()
        try:
            (target / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            target.rmdir()
            return None
        return target
    except OSError:
        return None
