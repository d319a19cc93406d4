"""bench/tune's modules import each other one way: every module imports on its own, no module-level import
cycle runs among them, and no function body imports a bench/tune module (the way to hide a cycle)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = "bench.tune"
FOLDER = Path(__file__).resolve().parent.parent / "bench" / "tune"
MODULES = sorted(f"{PACKAGE}.{p.stem}" for p in FOLDER.glob("*.py") if p.stem != "__init__")


def _tree(module: str) -> ast.Module:
    return ast.parse((FOLDER / f"{module.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8"))


def _targets(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The bench/tune modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = PACKAGE if node.level else (node.module or "")
        if node.level and node.module:
            base = f"{PACKAGE}.{node.module}"
        names = [base, *(f"{base}.{a.name}" for a in node.names)]
    return {n for n in names if n in MODULES}


def _module_level_imports(tree: ast.Module) -> set[str]:
    """Imports that run when the module is imported: outside every function (class bodies and `if`
    blocks included, `if TYPE_CHECKING:` too, since a type-only cycle is still a cycle)."""
    out: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= _targets(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imports_in_functions(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and (
                        _targets(node) or (isinstance(node, ast.ImportFrom) and node.level)
                        or any(a.name.startswith(PACKAGE) for a in getattr(node, "names", []))
                        or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE))):
                    found.append((fn.name, node.lineno))
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    tree = ast.parse("from bench.tune import runner\nimport bench.tune.cli\ndef f():\n    from bench.tune.result import x\n")
    assert _module_level_imports(tree) == {"bench.tune.runner", "bench.tune.cli"}
    assert _imports_in_functions(tree) == [("f", 4)]


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_on_its_own(module):
    assert importlib.import_module(module).__name__ == module


def test_no_module_level_import_cycle_among_bench_tune_modules():
    assert len(MODULES) >= 10
    graph = {m: _module_level_imports(_tree(m)) - {m} for m in MODULES}
    assert graph[f"{PACKAGE}.cli"] >= {f"{PACKAGE}.runner", f"{PACKAGE}.production"}  # the edges are seen
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_function_body_imports_a_bench_tune_module():
    found = {m: hits for m in MODULES if (hits := _imports_in_functions(_tree(m)))}
    assert not found, found
