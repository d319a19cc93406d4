"""Write a plan into the state dir: profile.json (read by sitecustomize) and the command line."""

from __future__ import annotations

import shlex
from pathlib import Path

from launcher import atomic
from launcher.plan import Plan

PROFILE_FILE = "profile.json"
CMDLINE_FILE = "cmdline"


def render(plan: Plan, state_dir: Path) -> Path:
    """Atomic per file; profile.json goes last because it is what a starting server reads."""
    state_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(state_dir / CMDLINE_FILE, shlex.join(plan.argv) + "\n")
    return atomic.write_json(state_dir / PROFILE_FILE, plan.to_json())


def read_rendered(state_dir: Path) -> dict | None:
    import json

    path = state_dir / PROFILE_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
