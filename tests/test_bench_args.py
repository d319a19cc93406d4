"""bench/args.py: `stop_on_interrupt` makes SIGINT (and SIGTERM) stop a command through its own stop path,
also when the shell that started it ignores SIGINT for background jobs."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from testsupport.stack import REPO

CHILD = """
import sys, time
from bench.args import stop_on_interrupt
stop_on_interrupt(sigterm=len(sys.argv) > 1)
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped cleanly", flush=True)
    sys.exit(130)
"""


def _ignoring_sigint() -> None:  # as `cmd &` in a non-interactive shell leaves it
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(("sig", "extra"), [(signal.SIGINT, []), (signal.SIGTERM, ["--sigterm"])])
def test_the_signal_reaches_the_stop_path_even_when_inherited_ignored(sig, extra):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *extra], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            preexec_fn=_ignoring_sigint, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "stopped cleanly" in out
