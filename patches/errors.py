"""The one failure the patch tool reports: a message saying what to do, and its exit code."""

from __future__ import annotations


class PatchError(Exception):
    """A failure with a message that tells the user what to do, and an exit code."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
