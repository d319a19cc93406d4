"""One owner per state dir: `launcher serve` locks it before it writes anything there.

The lock is an exclusive `flock` on the state dir itself (a descriptor of the directory, which cannot
be unlinked from under its owner as a file can), taken by serve and kept across its exec into
supervisord (same pid, same open file), so it lasts exactly as long as the supervisord that runs the
state dir's server. `serve.lock` only names the owner's pid. A second serve on the same state dir finds
the lock held, names the owner's pid and exits 2 without touching boot.json, supervisord.conf or the
rendered plan; deleting `serve.lock` frees nothing. supervisord closes inherited
descriptors in the programs it starts, so no server process keeps the lock after supervisord is gone;
on a reload it closes its descriptors from 5 up, so the lock moves to descriptor 3 before the exec.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from launcher import settings
from launcher.errors import UserError
from launcher.state_layout import StatePaths


def claim(paths: StatePaths) -> int:
    """The locked descriptor of the state dir (inheritable, for the exec into supervisord). UserError when
    another process owns the state dir, when `serve.lock` is not a plain file, or when the dir cannot take
    files; nothing else is written either way."""
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(paths, exc) from exc
    _refuse_odd_note(paths)
    try:
        fd = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _unwritable(paths, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise _unwritable(paths, exc) from exc
        owner = _owner_pid(paths)
        who = f"pid {owner}" if owner else "another process"
        raise UserError(
            f"{settings.KIT_STATE_DIR.name}={paths.root} is already served by {who} (it holds the lock on the state "
            "dir); nothing was changed: stop that server first (make down), or give this one its own state dir"
        ) from None
    try:
        note = os.open(paths.owner_lock, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        try:
            os.write(note, f"{os.getpid()}\n".encode())
            os.fsync(note)
        finally:
            os.close(note)
    except OSError as exc:
        os.close(fd)
        raise _unwritable(paths, exc) from exc
    os.set_inheritable(fd, True)
    return fd


KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
         (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _refuse_odd_note(paths: StatePaths) -> None:
    """`serve.lock` that is anything but a plain file is named for what it is, with the fix."""
    try:
        mode = os.lstat(paths.owner_lock).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _unwritable(paths, exc) from exc
    kind = next((name for test, name in KINDS if test(mode)), None)
    if kind is not None:
        raise UserError(f"{paths.owner_lock} is {kind}, not the plain file in which serve names its pid; nothing "
                        f"was changed: remove it (rm {'-r ' if kind == 'a directory' else ''}{paths.owner_lock}) "
                        "and start again")


LOCK_FD = 3  # below the descriptors supervisord closes on a reload (options.cleanup_fds starts at 5)


def hand_over(fd: int) -> None:
    """Move the lock to LOCK_FD, inheritable, right before the exec into supervisord."""
    if fd != LOCK_FD:
        os.dup2(fd, LOCK_FD, inheritable=True)
        os.close(fd)


def _owner_pid(paths: StatePaths) -> int | None:
    try:
        with open(paths.owner_lock, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as fh:
            text = fh.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _unwritable(paths: StatePaths, exc: OSError) -> UserError:
    return UserError(
        f"{settings.KIT_STATE_DIR.name}={paths.root}: cannot write there ({exc.strerror or exc}); "
        f"mount it writable for the server's user, or set {settings.KIT_STATE_DIR.name} (or --state-dir) to a writable folder"
    )
