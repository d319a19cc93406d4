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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.run_server")
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    path = Path(args.state_dir) / "profile.json"
    try:
        plan = json.loads(path.read_text())
        cmd = [str(x) for x in plan["argv"]]
    except (OSError, ValueError, KeyError) as exc:
        print(f"run_server: cannot read the rendered plan {path}: {exc}", file=sys.stderr)
        return 1
    if os.environ.get("KIT_ACTIVE_PROFILE") != plan.get("name"):
        print(f"run_server: sitecustomize did not apply {path}; is {Path(__file__).parent.parent / 'sitecustomize'} on PYTHONPATH?", file=sys.stderr)
        return 1
    os.environ.pop("KIT_CONTROL_TOKEN", None)  # the server has no business holding the control secret
    print(f"run_server: profile {plan.get('name')} spec {plan.get('spec')} digest {plan.get('digest')}: {' '.join(cmd)}", flush=True)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"run_server: cannot start {cmd[0]}: {exc}", file=sys.stderr)
        return 1
    return 0  # unreachable


if __name__ == "__main__":
    raise SystemExit(main())
