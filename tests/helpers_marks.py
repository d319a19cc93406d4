"""Which tests start processes: read from the source of the test and of what it uses, so no test has to
be marked by hand (conftest.py applies the mark)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Code of the tests themselves; the product's own code (launcher/, bench/) is what tests exercise in-process.
SCANNED = (REPO / "tests", REPO / "testsupport")
STARTS = re.compile(r"\b(subprocess|Popen|KitStack|FleetStack|standin_stack|kit_stack|multiprocessing|"
                    r"create_subprocess_exec|create_subprocess_shell|os\.fork|os\.system|os\.exec\w*|os\.spawn\w*)\b")
NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_verdicts: dict[int, bool] = {}


def _ours(obj: object) -> bool:
    try:
        path = Path(inspect.getsourcefile(obj) or "").resolve()  # type: ignore[arg-type]
    except TypeError:
        return False
    return any(path.is_relative_to(root) for root in SCANNED)


def _starts(obj: object, seen: set[int]) -> bool:
    """Whether the source of `obj`, or of a function or class of the tests it names, starts a process."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if id(obj) in _verdicts:
        return _verdicts[id(obj)]
    if id(obj) in seen or not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj)):
        return False
    if not _ours(obj):
        return False
    seen.add(id(obj))
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return False
    found = bool(STARTS.search(source))
    if not found:
        scope = getattr(inspect.unwrap(obj) if inspect.ismethod(obj) else obj, "__globals__", None)
        if scope is None:  # a class: the names its methods see
            scope = vars(inspect.getmodule(obj)) if inspect.getmodule(obj) else {}
        found = any(_starts(scope[n], seen) for n in set(NAME.findall(source)) if n in scope)
    _verdicts[id(obj)] = found
    return found


def starts_processes(test: Callable | None, fixtures: Iterable[Callable]) -> bool:
    """Whether a test, or any fixture it uses, starts a process (directly or through the tests' helpers)."""
    return any(_starts(f, set()) for f in [test, *fixtures] if f is not None)
