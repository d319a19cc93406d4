"""One owner per state dir: `launcher serve` locks it before it writes anything there.

The lock is an exclusive `flock` on `serve.lock`, taken by serve and kept across its exec into
supervisord (same pid, same open file), so it lasts exactly as long as the supervisord that runs the
state dir's server. A second serve on the same state dir finds it held, names the owner's pid and
exits 2 without touching boot.json, supervisord.conf or the rendered plan. supervisord closes inherited
descriptors in the programs it starts, so no server process keeps the lock after supervisord is gone;
on a reload it closes its descriptors from 5 up, so the lock moves to descriptor 3 before the exec.
"""

from __future__ import annotations

import errno
import fcntl
import os

from launcher import settings
from launcher.errors import UserError
from launcher.state_layout import StatePaths


def claim(paths: StatePaths) -> int:
    """The locked descriptor (inheritable, for the exec into supervisord). UserError when another
    process owns the state dir or the dir cannot take files; nothing else is written either way."""
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(paths.owner_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise _unwritable(paths, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = _owner_pid(fd)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise _unwritable(paths, exc) from exc
        who = f"pid {owner}" if owner else "another process"
        raise UserError(
            f"{settings.KIT_STATE_DIR.name}={paths.root} is already served by {who} (it holds {paths.owner_lock}); "
            "nothing was changed: stop that server first (make down), or give this one its own state dir"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        raise _unwritable(paths, exc) from exc
    os.set_inheritable(fd, True)
    return fd


LOCK_FD = 3  # below the descriptors supervisord closes on a reload (options.cleanup_fds starts at 5)


def hand_over(fd: int) -> None:
    """Move the lock to LOCK_FD, inheritable, right before the exec into supervisord."""
    if fd != LOCK_FD:
        os.dup2(fd, LOCK_FD, inheritable=True)
        os.close(fd)


def _owner_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _unwritable(paths: StatePaths, exc: OSError) -> UserError:
    return UserError(
        f"{settings.KIT_STATE_DIR.name}={paths.root}: cannot write there ({exc.strerror or exc}); "
        f"mount it writable for the server's user, or set {settings.KIT_STATE_DIR.name} (or --state-dir) to a writable folder"
    )
