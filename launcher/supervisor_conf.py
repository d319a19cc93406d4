"""Render supervisord.conf for the server container: the SGLang program, a log tail, the control API."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher import atomic


def sitecustomize_dir() -> Path:
    env = os.environ.get("KIT_SITECUSTOMIZE_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "sitecustomize"


@dataclass(frozen=True)
class Paths:
    state_dir: Path

    @property
    def conf(self) -> Path:
        return self.state_dir / "supervisord.conf"

    @property
    def socket(self) -> Path:
        return self.state_dir / "supervisor.sock"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs / "sglang.log"


def _q(value: str) -> str:
    """Quote for supervisord's environment= (and escape its %-expansion)."""
    return '"' + value.replace("%", "%%").replace('"', '\\"') + '"'


def _cmd(*parts: str) -> str:
    import shlex

    return shlex.join(parts).replace("%", "%%")


def render(paths: Paths, *, stop_wait_s: int, start_secs: int, start_retries: int) -> Path:
    py = sys.executable
    state = str(paths.state_dir)
    pythonpath = os.pathsep.join(p for p in (str(sitecustomize_dir()), os.environ.get("PYTHONPATH", "")) if p)
    paths.logs.mkdir(parents=True, exist_ok=True)
    text = f"""; Rendered by `launcher serve`; edits are overwritten at the next start.
[unix_http_server]
file={paths.socket}
chmod=0700

[supervisord]
nodaemon=true
logfile={paths.logs / 'supervisord.log'}
logfile_maxbytes=10MB
logfile_backups=3
pidfile={paths.state_dir / 'supervisord.pid'}
childlogdir={paths.logs}
loglevel=info

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{paths.socket}

[program:sglang]
; Runs the rendered plan's argv; sitecustomize applies the plan's env in every Python process.
command={_cmd(py, '-m', 'launcher.run_server', '--state-dir', state)}
environment=PYTHONPATH={_q(pythonpath)},KIT_STATE_DIR={_q(state)},PYTHONUNBUFFERED="1"
priority=100
autostart=true
autorestart=true
startsecs={start_secs}
startretries={start_retries}
stopsignal=TERM
stopwaitsecs={stop_wait_s}
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile={paths.server_log}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=5

[program:logtail]
; Copies the rotated server log to the container log.
command={_cmd('tail', '-n', '0', '-F', str(paths.server_log))}
priority=50
autorestart=true
stopasgroup=true
killasgroup=true
stopwaitsecs=2
stdout_logfile=/dev/stdout
stdout_logfile_maxbytes=0
redirect_stderr=true

[program:control]
command={_cmd(py, '-m', 'launcher.control_api', '--state-dir', state)}
environment=KIT_STATE_DIR={_q(state)},PYTHONUNBUFFERED="1"
priority=200
autorestart=true
startsecs=1
stopwaitsecs=10
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile=/dev/stdout
stdout_logfile_maxbytes=0
"""
    return atomic.write_text(paths.conf, text, mode=0o600)
