"""launcher.runtime.process.supervisor_conf: supervisord.conf for the state dir, timings from the KIT_* settings."""

from __future__ import annotations

import stat

import pytest

from launcher.runtime.process import supervisor_conf
from launcher.settings import SettingError
from launcher.state_layout import StatePaths


def _program(text: str, name: str) -> str:
    return text.split(f"[program:{name}]")[1].split("[program:")[0]


def test_supervisord_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/a%b")
    monkeypatch.setenv("KIT_STOP_WAIT_S", "7")
    monkeypatch.setenv("KIT_START_SECS", "2")
    monkeypatch.setenv("KIT_START_RETRIES", "4")
    paths = supervisor_conf.Paths(tmp_path)
    conf = supervisor_conf.render(paths)
    assert conf == paths.supervisord_conf
    text = conf.read_text()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert f"file={paths.socket}\nchmod=0700" in text
    assert "[inet_http_server]" not in text  # never TCP
    assert paths.logs.is_dir()
    sglang = _program(text, "sglang")
    for line in ("stopasgroup=true", "killasgroup=true", "stopwaitsecs=7", "startsecs=2", "startretries=4",
                 "autorestart=true", f"stdout_logfile={paths.server_log}", "stdout_logfile_backups=5"):
        assert line in sglang, line
    assert "launcher.runtime.process.server_exec" in sglang and f"KIT_STATE_DIR=\"{tmp_path}\"" in sglang
    assert "/a%%b" in sglang  # supervisord %-expansion escaped
    assert "[program:control]" in text and "launcher.runtime.api.control_api" in text


def test_timings_default_when_unset(tmp_path, monkeypatch):
    for name in ("KIT_STOP_WAIT_S", "KIT_START_SECS", "KIT_START_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    sglang = _program(supervisor_conf.render(StatePaths(tmp_path)).read_text(), "sglang")
    assert "stopwaitsecs=120" in sglang and "startsecs=5" in sglang and "startretries=3" in sglang


def test_bad_timing_setting_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STOP_WAIT_S", "soon")
    with pytest.raises(SettingError, match="KIT_STOP_WAIT_S"):
        supervisor_conf.render(StatePaths(tmp_path))
    assert not StatePaths(tmp_path).supervisord_conf.exists()
