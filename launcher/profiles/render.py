"""Write a plan into the state dir: profile.env (the env file sitecustomize applies), profile.json (the plan
server_exec and the control API read) and cmdline, each atomically; and the tuned adaptive config a plan
carries (KIT_STATE_DIR/adaptive/<sha>.json, launcher/profiles/adaptive_tiers.py), where its flags name it."""

from __future__ import annotations

import shlex
from pathlib import Path

from launcher import atomic
from launcher.profiles import env_file
from launcher.profiles.plan import ADAPTIVE_CONFIG_FLAG, Plan
from launcher.state_layout import StatePaths


def env_file_text(plan: Plan) -> str:
    """profile.env (launcher/profiles/env_file.py, whose limits the `env_file_size` rule keeps)."""
    return env_file.text(plan.name, plan.spec, plan.env)


PLAN_FILE_MODE = 0o600  # the env may hold values the operator exported; only the kit's user reads it


def write_plan(state_dir: Path, plan: Plan) -> Path:
    """Atomic per file; profile.json goes last because it is what a starting server reads.

    A stored previous plan (rollback) is rendered exactly as it was read. A file that already holds the
    right text is not rewritten, so a rollback on a full disk rewrites only what the failed render changed.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    paths = StatePaths(state_dir)
    if plan.adaptive_tiers is not None:  # the tuned adaptive config, where its --speculative-adaptive-config names it
        config = plan.flags[plan.flags.index(ADAPTIVE_CONFIG_FLAG) + 1]
        plan.adaptive_tiers.write(Path(config).parent)
    texts = (
        (paths.cmdline, shlex.join(plan.argv) + "\n"),
        (paths.profile_env, env_file_text(plan)),
        (paths.profile_json, atomic.json_text(plan.to_json())),
    )
    for path, text in texts:
        if atomic.holds(path, text):
            continue
        atomic.write_text(path, text, PLAN_FILE_MODE)
    return paths.profile_json



