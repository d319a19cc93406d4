import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_marks import starts_processes  # noqa: E402

from testsupport.stack import KitStack, stop_all  # noqa: E402


@pytest.fixture(scope="session")
def sglang_parser():
    """SGLang's real argument parser; it takes seconds to build, and sglang_args caches it: once per session."""
    from launcher.profiles import sglang_args

    return sglang_args.parser()


@pytest.fixture
def kit_stack(tmp_path):
    """Factory: start a real `launcher serve` over the stand-in; every stack is stopped afterwards."""
    stacks: list[KitStack] = []

    def make(profile: str = "baseline", spec: str = "off", extra_env: dict | None = None, start: bool = True) -> KitStack:
        stack = KitStack(tmp_path / f"stack{len(stacks)}", profile, spec, extra_env)
        stacks.append(stack)
        return stack.start() if start else stack

    yield make
    stop_all(stacks)


def pytest_itemcollected(item):
    """Mark a test that starts a process, itself or through a fixture or helper of the tests, `stack`:
    `make test-fast` leaves these out."""
    info = getattr(item, "_fixtureinfo", None)
    fixtures = [d.func for ds in info.name2fixturedefs.values() for d in ds] if info else []
    if starts_processes(getattr(item, "obj", None), fixtures):
        item.add_marker(pytest.mark.stack)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The cases of one parametrized test run in the order of their ids: xdist needs every worker to collect
    the same list, and cases drawn from a set come in another order in each process."""
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        first.setdefault(_test_of(item), i)
    items.sort(key=lambda item: (first[_test_of(item)], item.nodeid))


def _test_of(item) -> tuple[str, str]:
    """The test function a collected case belongs to: its parent's node id and its name before [params]."""
    return (item.parent.nodeid if item.parent else "", getattr(item, "originalname", item.name))
