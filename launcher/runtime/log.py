"""The runtime's log lines (stderr, which supervisord keeps in its log), written so that logging never fails.

A control API whose supervisord died writes into a pipe nobody reads: the write raises BrokenPipeError, and an
error handler that logs through print() would turn every answer into aiohttp's plain-text 500. These functions
drop a line they cannot write instead.
"""

from __future__ import annotations

import sys
import traceback


def line(text: str) -> None:
    """One line on stderr; nothing when stderr is gone (closed, a broken pipe)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # ValueError: stderr closed
        pass


def exception() -> None:
    """The exception being handled, with its traceback, on stderr; nothing when stderr is gone."""
    try:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
