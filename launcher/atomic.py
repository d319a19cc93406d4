"""Atomic state-file writes: readers never see a half-written file."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over the target."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def json_text(data: Any) -> str:
    """The one JSON layout of state files."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike[str], data: Any, mode: int = 0o644) -> Path:
    return write_text(path, json_text(data), mode)


def fsync_dir(folder: Path) -> None:
    """Make a rename or unlink in `folder` durable."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove(path: str | os.PathLike[str]) -> None:
    """Unlink durably; a file already gone is fine."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return
    fsync_dir(target.parent)


def append_line(path: str | os.PathLike[str], line: str, mode: int = 0o644) -> None:
    """Append one whole line with a single write (O_APPEND), so concurrent readers see whole lines.

    A file whose last line was cut short (a crash mid-write, a full disk) gets a line break first,
    so the new entry never fuses with the broken one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{target} is not a regular file")
        size = st.st_size
        lead = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
        data = lead + (line.rstrip("\n") + "\n").encode()
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {target}")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> tuple[bytes, int]:
    """The last `max_bytes` of a regular file and the offset they start at. Opened non-blocking and
    checked first, so a FIFO or a device in its place is an OSError, never a hang."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        start = max(0, st.st_size - max_bytes)
        return os.pread(fd, st.st_size - start, start), start
    finally:
        os.close(fd)
