"""Atomic state-file writes (readers never see a half-written file), whole-line appends, and the one way a
state file is opened: a regular file only, never through a symbolic link, never blocking (`open_regular`)."""

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


class NotRegular(OSError):
    """A path that is not a regular file: a symbolic link, a FIFO, a directory, a device or a socket."""


class TooLarge(OSError):
    """A file larger than what a file of its kind may hold."""


def kind(mode: int) -> str:
    """What a file of this st_mode is, as an error names it ("a FIFO")."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A descriptor of the regular file at `path`, opened with O_NOFOLLOW and O_NONBLOCK, so a symbolic link is
    never followed (a link to /etc/passwd, /dev/zero) and a FIFO or a device never blocks; NotRegular naming what is
    there instead. FileNotFoundError when nothing is (unless `flags` has O_CREAT)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        what = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a directory", errno.ENXIO: "a FIFO or a socket"}
        if exc.errno in what:
            raise NotRegular(f"{path} is {what[exc.errno]}, not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{path} is {kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: str | os.PathLike[str], cap: int) -> bytes:
    """The whole of a regular file (open_regular) of at most `cap` bytes; TooLarge when it holds more, without
    reading more than `cap` + 1 bytes (a file that grows while read included)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > cap:
            raise TooLarge(f"{path} holds {size} bytes, more than the {cap} a file of its kind may")
        chunks: list[bytes] = []
        got = 0
        while got <= cap:
            chunk = os.read(fd, cap + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > cap:
            raise TooLarge(f"{path} holds more than the {cap} bytes a file of its kind may")
        return b"".join(chunks)
    finally:
        os.close(fd)


def holds(path: str | os.PathLike[str], text: str) -> bool:
    """Whether `path` is a regular file (no link followed) holding exactly `text`, read capped at its size: a
    write that would change nothing is skipped; anything else (absent, a link, larger, unreadable) is rewritten."""
    data = text.encode("utf-8")
    try:
        return read_capped(path, len(data)) == data
    except OSError:  # NotRegular and TooLarge among them
        return False


def append_line(path: str | os.PathLike[str], line: str, mode: int = 0o644) -> None:
    """Append one whole line with a single write (O_APPEND), so concurrent readers see whole lines.

    Opened through open_regular: a symbolic link in the file's place is refused (NotRegular), never followed, so
    a link to another file (/etc/passwd) never gets the line; nor does a FIFO or a device.
    A file whose last line was cut short (a crash mid-write, a full disk) gets a line break first,
    so the new entry never fuses with the broken one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = open_regular(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)
    try:
        size = os.fstat(fd).st_size
        lead = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
        data = lead + (line.rstrip("\n") + "\n").encode()
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {target}")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> tuple[bytes, int]:
    """The last `max_bytes` of a regular file and the offset they start at (open_regular: a link, a FIFO or a
    device in its place is NotRegular, never followed and never a hang)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        return os.pread(fd, size - start, start), start
    finally:
        os.close(fd)
