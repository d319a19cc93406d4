"""supervisord's `sglang` program: exec the argv of the currently rendered plan.

Indirection lets a switch re-render profile.json and restart the program without touching
supervisord.conf. Its own interpreter already ran sitecustomize, so the env is in place; exec keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from launcher import settings
from launcher.resources import sitecustomize_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.runtime.server_exec")
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    path = settings.StatePaths(Path(args.state_dir)).profile_json
    try:
        plan = json.loads(path.read_text())
        cmd = [str(x) for x in plan["argv"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"server_exec: cannot read the rendered plan {path}: {exc}", file=sys.stderr)
        return 1
    if settings.ACTIVE_PROFILE.raw() != plan.get("name"):
        print(f"server_exec: sitecustomize did not apply {path}; is {sitecustomize_dir()} on PYTHONPATH?", file=sys.stderr)
        return 1
    os.environ.pop(settings.CONTROL_TOKEN.name, None)  # the server has no business holding the control secret
    print(f"server_exec: profile {plan.get('name')} spec {plan.get('spec')} digest {plan.get('digest')}: {' '.join(cmd)}", flush=True)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"server_exec: cannot start {cmd[0]}: {exc}", file=sys.stderr)
        return 1
    return 0  # unreachable


if __name__ == "__main__":
    raise SystemExit(main())
