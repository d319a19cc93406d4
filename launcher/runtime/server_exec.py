"""supervisord's `sglang` program: run the argv of the currently rendered plan, and end its whole tree.

Indirection lets a switch re-render profile.json and restart the program without touching
supervisord.conf. Its own interpreter already ran sitecustomize, so the env is in place and the
server inherits it. This process stays as the server's parent: it passes signals on, and when the
server exits (or is stopped) it ends every process the server left behind, also those that left
the process group (launcher/runtime/containment.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher import settings, state_layout
from launcher.profiles.plan import Plan
from launcher.resources import sitecustomize_dir
from launcher.runtime import parent_death
from launcher.runtime.containment import Containment

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
START_MARKER = "server_exec: profile "
"""Starts the line written before each server start (`... digest D pid P start MS: argv`): the control API's
log follower (start_records.Follower) keeps what each start logged under its pid and start time."""


def supervise(cmd: list[str], stop_grace_s: float) -> int:
    """Run `cmd` inside a containment, pass signals on, end everything left; the server's exit status."""
    box = Containment.enter()
    try:
        child = subprocess.Popen(cmd)
    except OSError as exc:
        print(f"server_exec: cannot start {cmd[0]}: {exc}", file=sys.stderr)
        box.release()
        return 1
    stop_at: list[float] = []

    def on_signal(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass
        if signum in STOPPING and not stop_at:
            stop_at.append(time.monotonic() + stop_grace_s)

    for sig in FORWARDED:
        signal.signal(sig, on_signal)
    while True:
        try:
            rc = child.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            if stop_at and time.monotonic() > stop_at[0]:
                child.kill()
    ended = box.end_all(LEFTOVER_GRACE_S)
    if ended:
        print(f"server_exec: ended {ended} process(es) the server left behind ({box.kind})", flush=True)
    box.release()
    return rc if rc >= 0 else 128 - rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.runtime.server_exec")
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    parent_death.tie_to_parent()  # supervisord gone: end the server's tree (no server left holding the port)
    path = state_layout.StatePaths(Path(args.state_dir)).profile_json
    try:
        plan = Plan.from_json(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"server_exec: cannot read the rendered plan {path}: {exc}", file=sys.stderr)
        return 1
    cmd = plan.argv
    if settings.KIT_ACTIVE_PROFILE.raw() != plan.name:
        print(f"server_exec: sitecustomize did not apply {path}; is {sitecustomize_dir()} on PYTHONPATH?", file=sys.stderr)
        return 1
    os.environ.pop(settings.KIT_CONTROL_TOKEN.name, None)  # the server has no business holding the control secret
    print(f"{START_MARKER}{plan.name} spec {plan.spec} digest {plan.digest()} pid {os.getpid()} "
          f"start {int(time.time() * 1000)}: {' '.join(cmd)}", flush=True)
    # supervisord kills the group after KIT_STOP_WAIT_S: end the tree well before that.
    return supervise(cmd, server_grace_s(settings.KIT_STOP_WAIT_S.get()))


if __name__ == "__main__":
    raise SystemExit(main())
