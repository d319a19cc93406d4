"""launcher.profiles.render: a plan written into the state dir (profile.json, profile.env, cmdline), each atomically."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_profiles import ENV, clean_env

from launcher.profiles.plan import Plan, build_plan
from launcher.profiles.render import env_file_text, write_plan
from launcher.resources import sitecustomize_dir
from launcher.runtime.process import supervisor_conf
from launcher.runtime.records.state import read_json
from launcher.state_layout import CMDLINE_FILE, StatePaths
from launcher.state_layout import PROFILE_ENV_FILE as ENV_FILE
from launcher.state_layout import PROFILE_JSON as PROFILE_FILE


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def assert_no_temp_files(state: Path) -> None:
    names = {p.name for p in state.iterdir()}
    assert {CMDLINE_FILE, PROFILE_FILE, ENV_FILE} <= names
    assert [n for n in names if n.startswith(".") or n.endswith(".tmp")] == []  # atomic writes leave none


@pytest.mark.stack
def test_the_server_program_reads_the_env_file_render_writes(tmp_path):
    """supervisord.conf names an env file for the server program; it must be the one render wrote, and
    sitecustomize, given that name, must apply the plan (a renamed or moved file applies nothing)."""
    plan = build_plan("custom-ar", "eagle3", environ=ENV)
    write_plan(tmp_path, plan)
    conf = supervisor_conf.render(StatePaths(tmp_path)).read_text()
    [line] = [ln for ln in conf.splitlines() if ln.startswith("environment=") and "KIT_PROFILE_ENV=" in ln]
    named = Path(re.search(r'KIT_PROFILE_ENV="([^"]*)"', line).group(1))
    written = {p for p in tmp_path.iterdir() if p.is_file() and p.name != "supervisord.conf"}
    assert named in written, (named, written)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(sitecustomize_dir()), "KIT_PROFILE_ENV": str(named)}
    out = subprocess.run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                         env=env, capture_output=True, text=True, timeout=30, check=True)
    seen = json.loads(out.stdout)
    assert (seen.get("KIT_ACTIVE_PROFILE"), seen.get("KIT_ACTIVE_SPEC")) == ("custom-ar", "eagle3"), out.stderr
    assert {k: seen.get(k) for k in plan.env} == plan.env


def test_render_writes_profile_json_and_cmdline(tmp_path):
    plan = build_plan("fused", "eagle3", environ=ENV)
    state = tmp_path / "state" / "nested"
    path = write_plan(state, plan)
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
    write_plan(tmp_path, plan)
    raw = StatePaths(tmp_path).profile_env.read_text()
    assert raw == env_file_text(plan)
    items = raw.split("\0")
    assert items[-1] == ""  # every entry ends in NUL
    assert items[:2] == ["KIT_ACTIVE_PROFILE=custom-ar", "KIT_ACTIVE_SPEC=eagle3"]
    assert dict(i.split("=", 1) for i in items[2:-1]) == plan.env


def test_rerender_replaces_both_files(tmp_path):
    write_plan(tmp_path, build_plan("fused", "eagle3", environ=ENV))
    second = build_plan("baseline", "off", environ={**ENV, "KIT_SERVER_CMD": "python -m testsupport.standin"})
    write_plan(tmp_path, second)
    assert_no_temp_files(tmp_path)
    assert read_json(StatePaths(tmp_path).profile_json)["name"] == "baseline"
    assert (
        StatePaths(tmp_path).cmdline
        .read_text()
        .startswith("python -m testsupport.standin --model-path /models/target")
    )


def test_rendered_file_is_what_sitecustomize_expects(tmp_path):
    write_plan(tmp_path, build_plan("custom-ar", "eagle3", environ=ENV))
    data = read_json(StatePaths(tmp_path).profile_json)
    assert isinstance(data["name"], str) and data["spec"] == "eagle3"
    assert data["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in data["env"].items())


def test_write_plan_renders_a_stored_plan_exactly(tmp_path):
    """Rollback re-renders the plan JSON it stored; the files must match the first render byte for byte."""
    first, again = tmp_path / "first", tmp_path / "again"
    write_plan(first, build_plan("custom-ar", "ngram", environ=ENV))
    stored = read_json(StatePaths(first).profile_json)
    write_plan(again, Plan.from_json(stored))
    files = {p.name: p.read_bytes() for p in first.iterdir()}
    assert {p.name: p.read_bytes() for p in again.iterdir()} == files
    assert_no_temp_files(again)
