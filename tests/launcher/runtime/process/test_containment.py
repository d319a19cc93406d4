"""launcher.runtime.process.containment and server_exec: a process that left the group is still ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from launcher.runtime.process.containment import Containment

pytestmark = pytest.mark.stack  # every test here starts a process


def orphan_then(last: str) -> str:
    """A server that starts a sleeper in its own session, prints its pid, then runs `last`."""
    return (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
        f"print(p.pid, flush=True); {last}"
    )


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _supervise(tmp_path, code: str) -> subprocess.Popen:
    """server_exec's supervise() in a child process (it becomes a subreaper), running `code`."""
    driver = (
        "import sys; from launcher.runtime.process.server_exec import supervise; "
        f"sys.exit(supervise([sys.executable, '-c', {code!r}], 2.0))"
    )
    return subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_sigterm_ends_a_grandchild_in_its_own_session(tmp_path):
    proc = _supervise(tmp_path, orphan_then("time.sleep(600)"))
    orphan = int(proc.stdout.readline())
    assert os.getsid(orphan) == orphan  # its own session: a group kill would miss it
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert _gone(orphan)
    assert "ended 1 process" in proc.stdout.read()


def test_a_server_that_exits_leaves_nothing_behind_and_its_status_is_kept(tmp_path):
    proc = _supervise(tmp_path, orphan_then("time.sleep(0.5); sys.exit(3)"))
    orphan = int(proc.stdout.readline())
    assert psutil.Process(orphan).is_running()
    assert proc.wait(timeout=20) == 3
    assert _gone(orphan)


def test_containment_kind_and_members():
    code = (
        "import json; from launcher.runtime.process.containment import Containment; import subprocess, sys; "
        "box = Containment.enter(); p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "members = [m.pid for m in box.members()]; n = box.end_all(1.0); "
        "print(json.dumps({'kind': box.kind, 'child_seen': p.pid in members, 'ended': n, 'left': len(box.members())}))"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout)
    assert out["kind"] in ("cgroup", "subreaper")
    assert out["child_seen"] and out["ended"] == 1 and out["left"] == 0
    assert Containment("subreaper").kind == "subreaper"
