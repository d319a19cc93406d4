"""Write a plan into the state dir: profile.json (read by sitecustomize) and the command line."""

from __future__ import annotations

import shlex
from pathlib import Path

from launcher import atomic, settings
from launcher.profiles.plan import Plan
from launcher.settings import StatePaths


def env_file_text(plan: dict) -> str:
    items = [(settings.ACTIVE_PROFILE.name, plan["name"]), (settings.ACTIVE_SPEC.name, plan["spec"]),
             *sorted(plan["env"].items())]
    return "".join(f"{k}={v}\0" for k, v in items)


def write_plan(state_dir: Path, plan: dict) -> Path:
    """Atomic per file; profile.json goes last because it is what a starting server reads.

    Takes plan JSON so a stored previous plan (rollback) is rendered exactly as it was.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    paths = StatePaths(state_dir)
    atomic.write_text(paths.cmdline, shlex.join(plan["argv"]) + "\n")
    atomic.write_text(paths.profile_env, env_file_text(plan))
    return atomic.write_json(paths.profile_json, plan)


def render(plan: Plan, state_dir: Path) -> Path:
    return write_plan(state_dir, plan.to_json())
