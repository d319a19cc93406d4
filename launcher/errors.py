"""Exit-code contract shared by every command: 2 = user mistake, 1 = runtime failure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the Makefile's checks import settings (and so this module) with a bare python3
    from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound="BaseModel")


class KitError(Exception):
    exit_code = 1


class UserError(KitError):
    """A mistake the user can fix (bad file, flag, name). Nothing was changed."""

    exit_code = 2


class RuntimeFailure(KitError):
    """Something failed while running (server died, timeout, unreachable URL)."""

    exit_code = 1


def run_cli(fn: Callable[[], int | None]) -> int:
    """Call a command body and map kit errors to one stderr line and an exit code, never a traceback."""
    try:
        rc = fn()
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0 if rc is None else rc


def schema_error(source: object, exc: ValidationError, hints: Mapping[str, str], default_hint: str) -> UserError:
    """The first pydantic error as one line: file, dotted key, what is wrong, and how to fix it."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    return UserError(f"{source}: key '{loc}': {err['msg']}; {hints.get(err['type'], default_hint)}")


def validated(model: type[M], raw: object, source: object, hints: Mapping[str, str], default_hint: str) -> M:
    """`raw` as the pydantic `model`, or the UserError of `schema_error` (exit 2) naming `source`, the key and the fix."""
    from pydantic import ValidationError

    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise schema_error(source, exc, hints, default_hint) from exc
