"""launcher.profiles.render: a plan written into the state dir (profile.json, profile.env, cmdline), each atomically."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from helpers_profiles import ENV, clean_env

from launcher.profiles.plan import build_plan
from launcher.profiles.render import env_file_text, render, write_plan
from launcher.runtime.state import read_json
from launcher.settings import CMDLINE_FILE, StatePaths
from launcher.settings import PROFILE_ENV_FILE as ENV_FILE
from launcher.settings import PROFILE_JSON as PROFILE_FILE


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def assert_no_temp_files(state: Path) -> None:
    names = {p.name for p in state.iterdir()}
    assert {CMDLINE_FILE, PROFILE_FILE, ENV_FILE} <= names
    assert [n for n in names if n.startswith(".") or n.endswith(".tmp")] == []  # atomic writes leave none


def test_file_names_are_the_state_paths():
    paths = StatePaths(Path("/s"))
    assert (paths.profile_json.name, paths.profile_env.name, paths.cmdline.name) == (PROFILE_FILE, ENV_FILE, CMDLINE_FILE)


def test_render_writes_profile_json_and_cmdline(tmp_path):
    plan = build_plan("fused", "eagle3", environ=ENV)
    state = tmp_path / "state" / "nested"
    path = render(plan, state)
    paths = StatePaths(state)
    assert path == paths.profile_json
    assert_no_temp_files(state)
    data = json.loads(path.read_text())
    assert data == plan.to_json()
    assert data["digest"] == plan.digest()
    assert paths.cmdline.read_text() == shlex.join(plan.argv) + "\n"
    assert shlex.split(paths.cmdline.read_text()) == plan.argv


def test_env_file_is_nul_separated_with_the_active_profile_first(tmp_path):
    plan = build_plan("custom-ar", "eagle3", environ=ENV)
    render(plan, tmp_path)
    raw = StatePaths(tmp_path).profile_env.read_text()
    assert raw == env_file_text(plan.to_json())
    items = raw.split("\0")
    assert items[-1] == ""  # every entry ends in NUL
    assert items[:2] == ["KIT_ACTIVE_PROFILE=custom-ar", "KIT_ACTIVE_SPEC=eagle3"]
    assert dict(i.split("=", 1) for i in items[2:-1]) == plan.env


def test_rerender_replaces_both_files(tmp_path):
    render(build_plan("fused", "eagle3", environ=ENV), tmp_path)
    second = build_plan("baseline", "off", environ={**ENV, "KIT_SERVER_CMD": "python -m testsupport.standin"})
    render(second, tmp_path)
    assert_no_temp_files(tmp_path)
    assert read_json(StatePaths(tmp_path).profile_json)["name"] == "baseline"
    assert (
        StatePaths(tmp_path).cmdline
        .read_text()
        .startswith("python -m testsupport.standin --model-path /models/target")
    )


def test_rendered_file_is_what_sitecustomize_expects(tmp_path):
    render(build_plan("custom-ar", "eagle3", environ=ENV), tmp_path)
    data = read_json(StatePaths(tmp_path).profile_json)
    assert isinstance(data["name"], str) and data["spec"] == "eagle3"
    assert data["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in data["env"].items())


def test_write_plan_renders_a_stored_plan_exactly(tmp_path):
    """Rollback re-renders the plan JSON it stored; the files must match the first render byte for byte."""
    first, again = tmp_path / "first", tmp_path / "again"
    render(build_plan("custom-ar", "ngram", environ=ENV), first)
    stored = read_json(StatePaths(first).profile_json)
    write_plan(again, stored)
    files = {p.name: p.read_bytes() for p in first.iterdir()}
    assert {p.name: p.read_bytes() for p in again.iterdir()} == files
    assert_no_temp_files(again)
