"""tests/conftest.py's check of the programs the tests run: before any test, one line names each missing one
with its Debian package, and pytest stops; a run whose tests need none of them is not stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PREREQUISITES, missing_prerequisites, selected_files

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def pytest_with_path(path: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest as `make test` runs it, with PATH holding only `path` (none of the tools)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO,
                          env={"PATH": str(path), "HOME": str(path)}, capture_output=True, text=True, timeout=120)


@pytest.mark.stack
def test_a_missing_tool_stops_pytest_before_any_test_naming_the_package(tmp_path):
    proc = pytest_with_path(tmp_path, "tests/test_monitoring.py", "tests/test_makefile.py::test_help_is_the_default_goal")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "ERROR: the tests need programs that are not installed: make (Debian: apt-get install make), "
        "promtool (Debian: apt-get install prometheus)"]
    assert "passed" not in proc.stdout and "failed" not in proc.stdout  # no test ran


@pytest.mark.stack
def test_tests_that_run_no_such_tool_are_not_stopped(tmp_path):
    proc = pytest_with_path(tmp_path, "tests/test_readme.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_whole_suite_needs_every_listed_tool():
    """With no file named, pytest selects tests/: each listed tool is used by some test file there, so a lost
    marker (a file renamed, a call rewritten) fails here instead of letting a missing tool through."""
    everything = selected_files([], REPO)
    assert len(everything) > 100
    found = missing_prerequisites(everything, which=lambda tool: None)
    assert found == [f"{t} (Debian: apt-get install {pkg})" for t, (pkg, _) in PREREQUISITES.items()]
    assert missing_prerequisites(everything, which=lambda tool: f"/usr/bin/{tool}") == []


def test_selected_files_reads_node_ids_and_folders():
    assert selected_files(["tests/test_monitoring.py::test_x"], REPO) == [TESTS / "test_monitoring.py"]
    assert TESTS / "test_makefile.py" in selected_files(["tests"], REPO)
    assert missing_prerequisites([TESTS / "test_readme.py"], which=lambda tool: None) == []
