"""The files under KIT_STATE_DIR, by role: the one place their names are spelled.

The server container's processes (serve, the control API, server_exec, supervisord) and the renderer
all find a state file through `StatePaths`, never by joining a name themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher import settings

PROFILE_JSON = "profile.json"  # the rendered plan: argv for server_exec, /plan for clients
PROFILE_ENV_FILE = "profile.env"  # NUL-separated NAME=value: what KIT_PROFILE_ENV names for the server
CMDLINE_FILE = "cmdline"
COMMITTED_FILE = "committed.json"
BOOT_FILE = "boot.json"
HISTORY_FILE = "history.jsonl"
JOURNAL_FILE = "switch.json"  # the switch in progress; present only while one runs or was cut short


# Role -> path under KIT_STATE_DIR.
STATE_LAYOUT = {
    "profile_json": PROFILE_JSON,
    "profile_env": PROFILE_ENV_FILE,
    "cmdline": CMDLINE_FILE,
    "committed": COMMITTED_FILE,
    "boot": BOOT_FILE,
    "history": HISTORY_FILE,
    "switch_counts": "switch-counts.json",  # the switch counters and the history size they cover (records/switch_counts.py)
    "journal": JOURNAL_FILE,
    "tune_hold": "tune-hold.json",  # the one bench tune allowed to measure this server (tune_hold.py)
    "supervisord_conf": "supervisord.conf",
    "supervisord_pid": "supervisord.pid",
    "owner_lock": "serve.lock",  # flock held by the serve (then supervisord) that owns the state dir
    "socket": "supervisor.sock",
    "logs": "logs",
    "server_log": "logs/sglang.log",
    "adaptive": "adaptive",  # tuned adaptive EAGLE configs, by content: <sha>.json (profiles/adaptive_tiers.py)
    "starts": "starts",  # one JSON record per server start: the activation lines each rank logged (start_records.py)
    "allreduce_check": "allreduce-check",  # the exact all-reduce check before a start: verdicts, log (allreduce_check.py)
    "supervisord_log": "logs/supervisord.log",
}


class StatePaths:
    """Every file under KIT_STATE_DIR, by role (the keys of STATE_LAYOUT)."""

    profile_json: Path
    profile_env: Path
    cmdline: Path
    committed: Path
    boot: Path
    history: Path
    switch_counts: Path
    journal: Path
    tune_hold: Path
    supervisord_conf: Path
    supervisord_pid: Path
    owner_lock: Path
    socket: Path
    logs: Path
    server_log: Path
    adaptive: Path
    starts: Path
    allreduce_check: Path
    supervisord_log: Path

    def __init__(self, root: Path):
        self.root = Path(root)
        for role, rel in STATE_LAYOUT.items():
            setattr(self, role, self.root / rel)


def state_paths(arg: str | os.PathLike[str] | None = None) -> StatePaths:
    """`--state-dir` when given, else KIT_STATE_DIR, else /var/lib/kit."""
    return StatePaths(Path(arg) if arg else settings.KIT_STATE_DIR.get())
