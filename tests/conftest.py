import json
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_tiers import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown  # noqa: E402,F401

from testsupport.stack import KitStack, stop_all  # noqa: E402

WEIGHTS = Path(__file__).resolve().parent / "file_seconds.json"

# Programs the tests run that pip does not install: tool -> (its Debian package, what a test file that runs it
# says: the tool in a subprocess call, or the kit code that calls it). .ci/run installs them.
PREREQUISITES = {
    "make": ("make", r'\["make"'),
    "patch": ("patch", r"patches/apply\.py|apply_series|from patches"),  # patches/gnu_patch.py runs GNU patch
    "promtool": ("prometheus", r"promtool"),
    "prometheus": ("prometheus", r'which\("prometheus"\)'),
    "bash": ("bash", r'\["bash"'),
}


def selected_files(args: list[str], start: Path) -> list[Path]:
    """The test files a pytest command line selects (`tests/x.py::test_y` counts as its file; a folder, its test
    files); the test folder when it names none."""
    out: list[Path] = []
    for arg in args:
        path = (start / arg.split("::", 1)[0]).resolve()
        if path.is_dir():
            out.extend(sorted(path.rglob("test_*.py")))
        elif path.suffix == ".py" and path.is_file():
            out.append(path)
    return out or sorted(Path(__file__).resolve().parent.rglob("test_*.py"))


def missing_prerequisites(files: list[Path], which=shutil.which) -> list[str]:
    """`tool (Debian: apt-get install package)` for each tool the files run that is not on PATH."""
    text = "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)
    return [f"{tool} (Debian: apt-get install {package})" for tool, (package, used) in PREREQUISITES.items()
            if re.search(used, text) and which(tool) is None]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Before any test runs (and before xdist starts its workers): every tool the selected tests run is installed,
    or one line names each missing one and how to install it, and pytest stops (exit 4, a usage error)."""
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has checked
        return
    missing = missing_prerequisites(selected_files(list(config.args), Path(config.invocation_params.dir)))
    if missing:
        raise pytest.UsageError(f"the tests need programs that are not installed: {', '.join(missing)}")


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The heaviest files first (tests/file_seconds.json, from measured runs: tools/suite_weights.py), so
    `make test`'s workers, which take whole files in this order (--dist loadfile --no-loadscope-reorder),
    end on short ones together. Within a file, the cases of one parametrized test run in the order of their
    ids: xdist needs every worker to collect the same list, and cases drawn from a set come in another order
    in each process."""
    weight = file_weights()
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        first.setdefault(_test_of(item), i)
    items.sort(key=lambda item: (-weight.get(_file_of(item), 0.0), first[_test_of(item)], item.nodeid))


def file_weights() -> dict[str, float]:
    """Seconds per test file as tools/suite_weights.py measured them, by path from the repository root."""
    return json.loads(WEIGHTS.read_text(encoding="utf-8"))


def _file_of(item) -> str:
    return item.nodeid.split("::")[0]


def _test_of(item) -> tuple[str, str]:
    """The test function a collected case belongs to: its parent's node id and its name before [params]."""
    return (item.parent.nodeid if item.parent else "", getattr(item, "originalname", item.name))
