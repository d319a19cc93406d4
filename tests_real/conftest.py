"""The real-server tier: real SGLang 0.5.23 on the CPU under a real `launcher serve`.

Run by `make test-real` with .venv-real's python (tools/real/install.sh builds it); never collected by
`make test`. A real start takes one to two minutes on two cores, so tests share a started server
wherever they do not need their own: `serving_stack` for the whole session, one stack per module
elsewhere. An idle real server is not idle on the CPU (its TP schedulers poll, about one core between
them), so every test of the shared server runs first and the server is stopped after the last of them,
before the tests that start servers of their own (the demo, the switches).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport.real.model import make_model
from testsupport.real.realstack import REAL_VENV, RealStack, in_real_venv

# A profile of the tier's own: baseline plus a variable no one else sets, to follow into the workers.
MARK_VAR, MARK_VALUE = "KITTEST_REAL_MARK", "serving-1"
SERVING_PROFILE = (
    'description = "real tier: baseline plus a marker variable"\nstatus = "experimental"\nextends = "baseline"\n'
    f'[env]\n{MARK_VAR} = "{MARK_VALUE}"\n'
)


SHARED: list[RealStack] = []  # the session's shared server, once started


def pytest_configure(config):
    config.addinivalue_line("markers", "restarts_shared: restarts the shared server; runs after its other tests")
    if not in_real_venv():
        raise pytest.UsageError(
            f"tests_real/ runs under {REAL_VENV}/bin/python (real SGLang 0.5.23): "
            "run `make test-real`, or `bash tools/real/install.sh` first"
        )


@pytest.fixture(scope="session")
def serving_mark() -> tuple[str, str]:
    """The variable the serving profile sets, and its value (a fixture: the tests import no conftest by name)."""
    return MARK_VAR, MARK_VALUE


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_model(tmp_path_factory.mktemp("model") / "tiny-llama", seed=0)


@pytest.fixture(scope="session")
def serving_stack(tmp_path_factory, tiny_model):
    """One real server for every test that only reads it: profile `real-serving`, spec off, TP 2."""
    stack = RealStack(tmp_path_factory.mktemp("serving"), tiny_model, "real-serving")
    stack.write_profile("real-serving", SERVING_PROFILE)
    SHARED.append(stack)
    try:
        yield stack.start()
    finally:
        stack.stop()


def _shares(item) -> bool:
    return "serving_stack" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items):
    """The shared server's tests first (one that restarts it last among them), each group in file order."""
    items.sort(key=lambda it: (not _shares(it), it.get_closest_marker("restarts_shared") is not None))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the shared server's last test, stop it: its idle schedulers would slow every test after it."""
    yield
    if _shares(item) and (nextitem is None or not _shares(nextitem)):
        for stack in SHARED:
            stack.stop()
