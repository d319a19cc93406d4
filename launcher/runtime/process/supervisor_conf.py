"""Render supervisord.conf for the server container: the SGLang program, a log tail, the control API."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher import atomic, settings
from launcher.resources import sitecustomize_dir
from launcher.state_layout import StatePaths as Paths


def _q(value: str) -> str:
    """Quote for supervisord's environment= (and escape its %-expansion)."""
    return '"' + value.replace("%", "%%").replace('"', '\\"') + '"'


def _cmd(*parts: str) -> str:
    import shlex

    return shlex.join(parts).replace("%", "%%")


def _supervisord(paths: Paths) -> str:
    """supervisord itself, its RPC socket and supervisorctl's way to it."""
    return f"""; Rendered by `launcher serve`; edits are overwritten at the next start.
[unix_http_server]
file={paths.socket}
chmod=0700

[supervisord]
nodaemon=true
logfile={paths.supervisord_log}
logfile_maxbytes=10MB
logfile_backups=3
pidfile={paths.supervisord_pid}
childlogdir={paths.logs}
loglevel=info

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{paths.socket}
"""


def _sglang(paths: Paths, py: str, state: str) -> str:
    """The SGLang program; timings from KIT_STOP_WAIT_S, KIT_START_SECS, KIT_START_RETRIES."""
    pythonpath = os.pathsep.join(p for p in (str(sitecustomize_dir()), os.environ.get("PYTHONPATH", "")) if p)
    return f"""
[program:sglang]
; Runs the rendered plan's argv; sitecustomize applies the plan's env in every Python process.
command={_cmd(py, '-m', 'launcher.runtime.process.server_exec', '--state-dir', state)}
environment=PYTHONPATH={_q(pythonpath)},{settings.KIT_STATE_DIR.name}={_q(state)},{settings.KIT_PROFILE_ENV.name}={_q(str(paths.profile_env))},PYTHONUNBUFFERED="1"
priority=100
autostart=true
autorestart=true
startsecs={settings.KIT_START_SECS.get()}
startretries={settings.KIT_START_RETRIES.get()}
stopsignal=TERM
stopwaitsecs={settings.KIT_STOP_WAIT_S.get()}
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile={paths.server_log}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=5
"""


def _logtail(paths: Paths) -> str:
    return f"""
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
"""


def _control(py: str, state: str) -> str:
    return f"""
[program:control]
command={_cmd(py, '-m', 'launcher.runtime.api.control_api', '--state-dir', state)}
environment={settings.KIT_STATE_DIR.name}={_q(state)},PYTHONUNBUFFERED="1"
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


def render(paths: Paths) -> Path:
    """supervisord.conf for the state dir: supervisord, the SGLang program, a log tail, the control API."""
    py, state = sys.executable, str(paths.root)
    paths.logs.mkdir(parents=True, exist_ok=True)
    text = _supervisord(paths) + _sglang(paths, py, state) + _logtail(paths) + _control(py, state)
    return atomic.write_text(paths.supervisord_conf, text, mode=0o600)
