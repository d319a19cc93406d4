"""tests/helpers_tiers.py, the tier check: in a pytest run of its own, a test that starts a process without the
`stack` mark fails and names the call, whichever way it starts it; a marked one and one that starts nothing
pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack  # runs pytest in a subprocess

TESTS = Path(__file__).resolve().parent

SAMPLE = '''
import asyncio, multiprocessing, os, subprocess
import pytest

def test_in_process():
    assert sum(range(3)) == 3

def test_subprocess_run():
    subprocess.run(["true"], check=False)

def test_popen_in_a_helper():
    helper()

def helper():
    return subprocess.Popen(["true"]).wait()

def test_os_system():
    os.system("true")

def test_asyncio_subprocess():
    async def main():
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
    asyncio.run(main())

def test_multiprocessing_spawn():
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=print)
    p.start()
    p.join()

@pytest.fixture
def server():
    return subprocess.run(["true"], check=False)

def test_through_a_fixture(server):
    pass

@pytest.mark.stack
def test_marked():
    assert subprocess.run(["true"], check=False).returncode == 0
'''

CONFTEST = '''
import sys
sys.path.insert(0, {tests!r})
from helpers_tiers import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401
'''


def test_an_unmarked_test_that_starts_a_process_fails_naming_the_call(tmp_path: Path):
    (tmp_path / "conftest.py").write_text(CONFTEST.format(tests=str(TESTS)))
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    stack: starts a process\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "-p", "no:xdist",
                          str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines()
              if line.startswith(("FAILED", "ERROR")) and "::" in line}
    assert failed == {"test_subprocess_run", "test_popen_in_a_helper", "test_os_system", "test_asyncio_subprocess",
                      "test_multiprocessing_spawn", "test_through_a_fixture"}, out
    assert "2 passed" in out, out  # test_in_process and test_marked
    assert "test_sample.py::test_os_system starts a process (os.system) but is not marked stack" in out, out
