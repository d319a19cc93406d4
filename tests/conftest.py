import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_marks import group_of, starts_processes  # noqa: E402

from testsupport.stack import KitStack  # noqa: E402


@pytest.fixture
def kit_stack(tmp_path):
    """Factory: start a real `launcher serve` over the stand-in; every stack is stopped afterwards."""
    stacks: list[KitStack] = []

    def make(profile: str = "baseline", spec: str = "off", extra_env: dict | None = None, start: bool = True) -> KitStack:
        stack = KitStack(tmp_path / f"stack{len(stacks)}", profile, spec, extra_env)
        stacks.append(stack)
        return stack.start() if start else stack

    yield make
    for s in stacks:
        s.stop()


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a process `stack` (`make test-fast` leaves them out), and keep the tests
    that share a fixture wider than one test on one xdist worker (`--dist loadgroup`), so it is set up once."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in info.name2fixturedefs.values() for d in ds] if info else []
        if starts_processes(getattr(item, "obj", None), [d.func for d in defs]):
            item.add_marker(pytest.mark.stack)
        group = group_of(item.nodeid, [(d.baseid, d.argname, d.scope, d.func) for d in defs])
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
