import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
