"""launcher/runtime/process/parent_death.py: a process tied to its parent ends when the parent is SIGKILLed."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from testsupport.stack import REPO

pytestmark = pytest.mark.stack  # every test here starts a process

CHILD = "from launcher.runtime.process import parent_death; import time; parent_death.tie_to_parent(); print('tied', flush=True); time.sleep(600)"
UNTIED = "import time; print('tied', flush=True); time.sleep(600)"


def _parent(code: str) -> tuple[subprocess.Popen, psutil.Process]:
    """A parent process that starts `code` as its child and waits; returns (parent, child) once the child
    said it is tied."""
    parent_code = (f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {code!r}], cwd={str(REPO)!r}, "
                   "stdout=subprocess.PIPE, text=True); print(p.pid, flush=True); print(p.stdout.readline().strip(), "
                   "flush=True); p.wait()")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    assert parent.stdout.readline().strip() == "tied"
    return parent, child


def test_a_tied_child_ends_with_its_parent():
    parent, child = _parent(CHILD)
    parent.kill()
    parent.wait(timeout=30)
    child.wait(timeout=60)  # psutil.TimeoutExpired if it outlived its parent
    assert not child.is_running()


def test_an_untied_child_outlives_its_parent_which_is_what_the_tie_prevents():
    parent, child = _parent(UNTIED)
    try:
        parent.kill()
        parent.wait(timeout=30)
        assert child.is_running() and child.ppid() != parent.pid
    finally:
        child.kill()
