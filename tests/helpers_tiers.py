"""The tiers, checked: a test that starts a process says so (`@pytest.mark.stack`, or `pytestmark` for its
file), because `make test-fast` leaves those out. While any other test is set up, runs or is torn down, each
way Python starts a process fails it, naming the test and the call (conftest.py takes these hooks)."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Iterator

import pytest

# Where the standard library starts a process: subprocess (asyncio's and multiprocessing's spawn too) through
# _posixsubprocess.fork_exec or os.posix_spawn; fork, system, popen and the exec and spawn families directly.
OS_CALLS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen", "execv", "execve", "execl",
            "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve", "spawnl", "spawnle")


def _refusal(test: str, call: str):
    def refused(*args, **kwargs):
        pytest.fail(f"{test} starts a process ({call}) but is not marked stack: add @pytest.mark.stack "
                    "(or pytestmark = pytest.mark.stack for its file)")
    return refused


@contextlib.contextmanager
def no_process_starts(item: pytest.Item) -> Iterator[None]:
    """Every process start refused while the block runs, unless `item` is marked stack."""
    if item.get_closest_marker("stack") is not None:
        yield
        return
    targets = [(_posixsubprocess, "fork_exec")]
    targets += [(subprocess, "_fork_exec")] if hasattr(subprocess, "_fork_exec") else []
    targets += [(os, call) for call in OS_CALLS if hasattr(os, call)]
    saved = [(owner, name, getattr(owner, name)) for owner, name in targets]
    for owner, name, _ in saved:
        setattr(owner, name, _refusal(item.nodeid, f"{owner.__name__}.{name}"))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with no_process_starts(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with no_process_starts(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with no_process_starts(item):
        yield
