"""Rendering a plan into the state dir: profile.json and the command line, each written atomically."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from helpers_profiles import ENV, clean_env

from launcher.profiles.plan import build_plan
from launcher.profiles.render import CMDLINE_FILE, PROFILE_FILE, read_rendered, render, write_plan


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def assert_no_temp_files(state: Path) -> None:
    names = {p.name for p in state.iterdir()}
    assert {CMDLINE_FILE, PROFILE_FILE} <= names
    assert [n for n in names if n.startswith(".") or n.endswith(".tmp")] == []  # atomic writes leave none


def test_render_writes_profile_json_and_cmdline(tmp_path):
    plan = build_plan("fused", "eagle3", environ=ENV)
    state = tmp_path / "state" / "nested"
    path = render(plan, state)
    assert path == state / PROFILE_FILE
    assert_no_temp_files(state)
    data = json.loads(path.read_text())
    assert data == plan.to_json()
    assert data["digest"] == plan.digest()
    assert (state / CMDLINE_FILE).read_text() == shlex.join(plan.argv) + "\n"
    assert shlex.split((state / CMDLINE_FILE).read_text()) == plan.argv


def test_rerender_replaces_both_files(tmp_path):
    render(build_plan("fused", "eagle3", environ=ENV), tmp_path)
    second = build_plan("baseline", "off", environ={**ENV, "KIT_SERVER_CMD": "python -m testsupport.standin"})
    render(second, tmp_path)
    assert_no_temp_files(tmp_path)
    assert read_rendered(tmp_path)["name"] == "baseline"
    assert (
        (tmp_path / CMDLINE_FILE)
        .read_text()
        .startswith("python -m testsupport.standin --model-path /models/target")
    )


def test_rendered_file_is_what_sitecustomize_expects(tmp_path):
    render(build_plan("custom-ar", "eagle3", environ=ENV), tmp_path)
    data = read_rendered(tmp_path)
    assert isinstance(data["name"], str) and data["spec"] == "eagle3"
    assert data["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in data["env"].items())


def test_write_plan_renders_a_stored_plan_exactly(tmp_path):
    """Rollback re-renders the plan JSON it stored; the files must match the first render byte for byte."""
    first, again = tmp_path / "first", tmp_path / "again"
    render(build_plan("custom-ar", "ngram", environ=ENV), first)
    stored = read_rendered(first)
    write_plan(again, stored)
    files = {p.name: p.read_bytes() for p in first.iterdir()}
    assert {p.name: p.read_bytes() for p in again.iterdir()} == files
    assert_no_temp_files(again)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"', ""])
def test_read_rendered_missing_or_malformed_is_none(tmp_path, text):
    assert read_rendered(tmp_path) is None
    (tmp_path / PROFILE_FILE).write_text(text)
    assert read_rendered(tmp_path) is None
