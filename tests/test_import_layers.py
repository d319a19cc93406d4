"""Which package may import which: pyproject.toml's [tool.importlinter] contracts, checked by `lint-imports`
(import-linter), on the repository and on a copy with one forbidden import added; besides, what a contract
cannot say: patches/ and sitecustomize/ use the standard library only, every bench/tune module imports on
its own and none imports another inside a function."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("launcher", "bench", "testsupport", "patches")  # [tool.importlinter] root_packages
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
NAMES = {c["id"]: c["name"] for c in CONTRACTS}


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS.is_file(), f"{LINT_IMPORTS} is missing: pip install -e '.[dev]' (import-linter)"
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, capture_output=True,
                          text=True, timeout=120)


def _verdicts(output: str) -> dict[str, str]:
    """contract name -> KEPT or BROKEN, from lint-imports' list (a long name is wrapped over lines)."""
    listing = output.split("Contracts:", 1)[0].split("dependencies.", 1)[-1]
    text = " ".join(listing.split())
    return {name: verdict for name, verdict in re.findall(r"(\S.*?) (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?",
                                                           text)}


def _verdict(verdicts: dict[str, str], name: str) -> str:
    flat = " ".join(name.split())
    return next((v for n, v in verdicts.items() if n.strip("- ").endswith(flat)), "missing")


@pytest.mark.stack
def test_the_repository_keeps_every_contract():
    assert len(CONTRACTS) >= 10 and len(NAMES) == len(CONTRACTS)  # every contract has its own id
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout, result.stdout
    verdicts = _verdicts(result.stdout)
    assert all(_verdict(verdicts, name) == "KEPT" for name in NAMES.values()), verdicts


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The packages' Python files and pyproject.toml, copied: a test adds one import and puts the file back."""
    root = tmp_path_factory.mktemp("layers")
    def not_python(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or not (n.endswith(".py") or (Path(folder) / n).is_dir())]

    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=not_python)
    shutil.copy(REPO / "pyproject.toml", root)
    return root


# (file, the import added at its end, the contract it breaks)
FORBIDDEN = [
    ("launcher/errors.py", "import bench", "top"),
    ("bench/client/workload.py", "import testsupport", "product-without-testsupport"),
    ("bench/report/tables.py", "import tools.suite_weights", "tools-on-top"),
    ("patches/errors.py", "import launcher", "patches-standalone"),
    ("launcher/runtime/core/states.py", "import os", "pure-core"),
    ("launcher/runtime/core/transitions.py", "from launcher.runtime.process import supervisor_rpc", "pure-core"),
    ("launcher/profiles/plan.py", "from launcher.runtime import lifecycle", "launcher-layers"),
    ("launcher/runtime/records/state.py", "from launcher.runtime import switch", "runtime-layers"),
    ("bench/client/server_client.py", "from bench.run import passes", "bench-layers"),
    ("bench/tune/space.py", "from bench.tune import runner", "tune-layers"),
    # an import inside a function counts: it closes the cycle reply -> logprob_rows -> reply
    ("bench/client/logprob_rows.py", "def _late():\n    from bench.client import reply\n    return reply", "no-cycles"),
]


@pytest.mark.stack
@pytest.mark.parametrize(("path", "line", "contract"), FORBIDDEN, ids=[f"{c}:{p}" for p, _, c in FORBIDDEN])
def test_a_forbidden_import_breaks_its_contract(copy, path, line, contract):
    target = copy / path
    original = target.read_text(encoding="utf-8")
    target.write_text(f"{original}\n\n{line}\n", encoding="utf-8")
    try:
        result = _lint(copy)
    finally:
        target.write_text(original, encoding="utf-8")
    assert result.returncode != 0, result.stdout
    verdicts = _verdicts(result.stdout)
    assert _verdict(verdicts, NAMES[contract]) == "BROKEN", result.stdout
    broken = [name for name in NAMES.values() if _verdict(verdicts, name) == "BROKEN"]
    assert re.search(rf"Contracts: \d+ kept, {len(broken)} broken\.", result.stdout), result.stdout


@pytest.mark.stack
def test_the_copy_alone_keeps_every_contract(copy):
    """What the forbidden imports break is theirs: the unchanged copy keeps every contract."""
    result = _lint(copy)
    assert result.returncode == 0 and f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout, result.stdout


# ----- what no contract says --------------------------------------------------------------------------------


def _imported(tree: ast.Module) -> set[str]:
    """The top-level module names a file's absolute imports name, anywhere in it."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize(("folder", "own"), [("patches", {"patches"}), ("sitecustomize", set())])
def test_patches_and_sitecustomize_use_the_standard_library_only(folder, own):
    """patches/ runs in the image before the kit is installed; sitecustomize/ runs inside SGLang's Python."""
    files = sorted((REPO / folder).rglob("*.py"))
    assert files
    found = {str(f.relative_to(REPO)): sorted(names) for f in files
             if (names := _imported(ast.parse(f.read_text(encoding="utf-8"))) - set(sys.stdlib_module_names) - own)}
    assert not found, found


def test_the_standard_library_check_sees_a_third_party_import():
    assert _imported(ast.parse("import os\nfrom pydantic import BaseModel\ndef f():\n    import supervisor.xmlrpc\n")) \
        - set(sys.stdlib_module_names) == {"pydantic", "supervisor"}


TUNE = REPO / "bench" / "tune"
TUNE_MODULES = sorted(f"bench.tune.{p.stem}" for p in TUNE.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", TUNE_MODULES)
def test_each_bench_tune_module_imports_on_its_own(module):
    assert importlib.import_module(module).__name__ == module


def _tune_imports_in_functions(source: str) -> list[tuple[str, int]]:
    """(function, line) of each import inside a function body that loads a bench.tune module."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):
                    names = [f".{node.module or ''}" if node.level else node.module or ""]
                if any(n.startswith((".", "bench.tune")) for n in names):
                    found.append((fn.name, node.lineno))
    return found


def test_no_function_body_imports_a_bench_tune_module():
    assert len(TUNE_MODULES) >= 10
    assert _tune_imports_in_functions("def f():\n    from bench.tune.result import x\n") == [("f", 2)]
    assert _tune_imports_in_functions("def f():\n    from . import x\n") == [("f", 2)]
    assert _tune_imports_in_functions("from bench.tune import runner\ndef f():\n    import json\n") == []
    found = {m: hits for m in TUNE_MODULES
             if (hits := _tune_imports_in_functions((TUNE / f"{m.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")))}
    assert not found, found
