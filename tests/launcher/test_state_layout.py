"""launcher.state_layout: every state file by role, under --state-dir or KIT_STATE_DIR."""

from __future__ import annotations

from launcher import state_layout
from launcher.state_layout import STATE_LAYOUT, StatePaths


def test_every_role_is_a_distinct_path_under_the_root(tmp_path):
    paths = StatePaths(tmp_path)
    got = [getattr(paths, role) for role in STATE_LAYOUT]
    assert len(set(got)) == len(got) and all(p.is_relative_to(tmp_path) for p in got)
    assert set(StatePaths.__annotations__) == set(STATE_LAYOUT)


def test_the_argument_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path / "env"))
    assert state_layout.state_paths(str(tmp_path / "arg")).root == tmp_path / "arg"
    assert state_layout.state_paths().root == tmp_path / "env"
