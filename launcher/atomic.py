"""Atomic state-file writes: readers never see a half-written file."""

from __future__ import annotations

import json
import os
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
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def write_json(path: str | os.PathLike[str], data: Any, mode: int = 0o644) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line with a single write (O_APPEND), so concurrent readers see whole lines."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
