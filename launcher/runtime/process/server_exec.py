"""supervisord's `sglang` program: run the argv of the currently rendered plan, and end its whole tree.

Indirection lets a switch re-render profile.json and restart the program without touching
supervisord.conf. Its own interpreter already ran sitecustomize, so the env is in place and the
server inherits it. This process stays as the server's parent: it passes signals on, and when the
server exits (or is stopped) it ends every process the server left behind, also those that left
the process group (launcher/runtime/process/containment.py).

Before SGLang, under a profile that changes its all-reduce, it runs the exact check of that backend on the
server's GPUs in the same containment (launcher/runtime/allreduce_check.py): a wrong sum ends the start
with exit 1 and a line naming the backend and the element, as any failed start.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from launcher import settings, state_layout
from launcher.profiles.plan import Plan
from launcher.resources import sitecustomize_dir
from launcher.runtime import allreduce_check
from launcher.runtime.process import parent_death
from launcher.runtime.process.containment import Containment
from launcher.runtime.records import state as runtime_state
from launcher.runtime.start_lines import START_MARKER

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
LEFTOVER_GRACE_S = 2.0  # SIGTERM to SIGKILL for processes still there after the server exited
STOP_MARGIN_S = 1.5  # the exit poll, end_all's SIGKILL sweep and reaping, before supervisord's own SIGKILL
MIN_SERVER_GRACE_S = 1.0  # the least time a server gets between SIGTERM and SIGKILL


def server_grace_s(stop_wait_s: float) -> float:
    """SIGTERM-to-SIGKILL time for the server, so that ending its leftovers still fits in supervisord's
    stop wait: supervisord SIGKILLs this process's group at stop_wait_s, and a leftover that left the
    group survives that unless end_all has already run."""
    return stop_wait_s - LEFTOVER_GRACE_S - STOP_MARGIN_S


MIN_STOP_WAIT_S = int(LEFTOVER_GRACE_S + STOP_MARGIN_S + MIN_SERVER_GRACE_S + 0.999)  # the registry's lower bound


class Supervisor:
    """Runs commands one after the other inside one containment, passing signals on to the one running.

    A stopping signal (SIGTERM, SIGINT, SIGQUIT) also holds for what is not started yet: after one,
    `run` starts nothing more and answers as a process killed by it would."""

    def __init__(self, stop_grace_s: float):
        self.stop_grace_s = stop_grace_s
        self.box: Containment | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.stopped_by: int | None = None
        self.stop_at: float | None = None

    def __enter__(self) -> Supervisor:
        self.box = Containment.enter()
        for sig in FORWARDED:
            signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.box is not None:
            self.box.release()

    def _on_signal(self, signum: int, _frame: object) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass
        if signum in STOPPING and self.stopped_by is None:
            self.stopped_by = signum
            self.stop_at = time.monotonic() + self.stop_grace_s

    def run(self, cmd: list[str], output: IO[str] | None = None, what: str = "the server") -> int:
        """`cmd`'s exit status (128 + N when signal N ended it, or stopped it before it started); every
        process it left behind is ended before this returns. `output`: a file for its stdout and stderr
        (default: this process's, the server log)."""
        assert self.box is not None, "use Supervisor as a context manager"
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        try:
            child = self.child = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT if output else None)
        except OSError as exc:
            print(f"server_exec: cannot start {cmd[0]}: {exc}", file=sys.stderr)
            return 1
        if self.stopped_by is not None:  # the signal came while it was being started
            child.send_signal(self.stopped_by)
        while True:
            try:
                rc = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if self.stop_at is not None and time.monotonic() > self.stop_at:
                    child.kill()
        ended = self.box.end_all(LEFTOVER_GRACE_S)
        if ended:
            print(f"server_exec: ended {ended} process(es) {what} left behind ({self.box.kind})", flush=True)
        return rc if rc >= 0 else 128 - rc


def supervise(cmd: list[str], stop_grace_s: float) -> int:
    """Run `cmd` inside a containment, pass signals on, end everything left; the server's exit status."""
    with Supervisor(stop_grace_s) as sup:
        return sup.run(cmd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.runtime.process.server_exec")
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    parent_death.tie_to_parent()  # supervisord gone: end the server's tree (no server left holding the port)
    path = state_layout.StatePaths(Path(args.state_dir)).profile_json
    try:
        plan = runtime_state.load(path, Plan)  # a regular file of bounded size, as its model (state.py)
        if plan is None:
            raise runtime_state.Damaged(path, "absent")
    except runtime_state.Damaged as exc:
        print(f"server_exec: cannot read the rendered plan {exc}", file=sys.stderr)
        return 1
    cmd = plan.argv
    if settings.KIT_ACTIVE_PROFILE.raw() != plan.name:
        print(f"server_exec: sitecustomize did not apply {path}; is {sitecustomize_dir()} on PYTHONPATH?", file=sys.stderr)
        return 1
    os.environ.pop(settings.KIT_CONTROL_TOKEN.name, None)  # the server has no business holding the control secret
    print(f"{START_MARKER}{plan.name} spec {plan.spec} digest {plan.digest()} pid {os.getpid()} "
          f"start {int(time.time() * 1000)}: {' '.join(cmd)}", flush=True)
    # supervisord kills the group after KIT_STOP_WAIT_S: end the tree well before that.
    with Supervisor(server_grace_s(settings.KIT_STOP_WAIT_S.get())) as sup:
        check = _allreduce_check(plan, Path(args.state_dir), sup)
        if check.stop is not None:
            return check.stop
        return sup.run(cmd)


def _allreduce_check(plan: Plan, state_dir: Path, sup: Supervisor) -> allreduce_check.Outcome:
    """The exact check of the profile's all-reduce (allreduce_check.py), its lines in the server log. Only a
    wrong sum (or a stop) ends the start: a check that breaks is reported, and SGLang starts."""
    try:
        check = allreduce_check.before_start(
            plan, state_dir, lambda argv, out: sup.run(argv, out, "the all-reduce check"),
            stopped=lambda: None if sup.stopped_by is None else 128 + sup.stopped_by)
    except Exception as exc:  # the kit's own failure must not keep a server from starting
        check = allreduce_check.Outcome(None, [f"all-reduce check not run: it failed ({type(exc).__name__}: {exc}); "
                                               "starting SGLang unchecked"])
    for line in check.lines:
        print(f"server_exec: {line}", flush=True)
    return check


if __name__ == "__main__":
    raise SystemExit(main())
