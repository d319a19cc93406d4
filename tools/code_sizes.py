"""Print the structure figures of the product code (launcher/, bench/): the longest modules and functions
against the limits (400 lines a module, 60 a function), and how often `dict[str, Any]` stands in each package.

    python tools/code_sizes.py            # the figures docs/development.md quotes
    python tools/code_sizes.py --check    # exit 1 naming each module or function over its limit

A module's size is its line count (`wc -l`); a function's, from its `def` line to its last line
(decorators left out), nested functions counted on their own too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("launcher", "bench")
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60
UNTYPED = "dict[str, Any]"


@dataclass(frozen=True)
class Size:
    """One module or function and its length in lines."""

    where: str
    lines: int


def module_sizes(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Size]:
    """Every module of the packages, longest first."""
    sizes = [Size(str(p.relative_to(root)), len(p.read_text(encoding="utf-8").splitlines()))
             for package in packages for p in sorted((root / package).rglob("*.py"))]
    return sorted(sizes, key=lambda s: (-s.lines, s.where))


def function_sizes(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Size]:
    """Every function and method of the packages, longest first."""
    out: list[Size] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
                    out.append(Size(where, (node.end_lineno or node.lineno) - node.lineno + 1))
    return sorted(out, key=lambda s: (-s.lines, s.where))


def untyped_counts(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, int]:
    """How many times `dict[str, Any]` stands in each package's code."""
    return {package: sum(p.read_text(encoding="utf-8").count(UNTYPED) for p in (root / package).rglob("*.py"))
            for package in packages}


def over_limits(root: Path) -> list[str]:
    """`where: N lines (limit L)` for each module and function over its limit."""
    modules = [f"{s.where}: {s.lines} lines (limit {MODULE_LIMIT})" for s in module_sizes(root)
               if s.lines > MODULE_LIMIT]
    functions = [f"{s.where}: {s.lines} lines (limit {FUNCTION_LIMIT})" for s in function_sizes(root)
                 if s.lines > FUNCTION_LIMIT]
    return modules + functions


def report(root: Path, top: int) -> str:
    modules, functions = module_sizes(root), function_sizes(root)
    lines = [f"{len(modules)} modules, {len(functions)} functions in {', '.join(PACKAGES)}",
             f"longest modules (limit {MODULE_LIMIT}):"]
    lines += [f"  {s.lines:5d}  {s.where}" for s in modules[:top]]
    lines.append(f"longest functions (limit {FUNCTION_LIMIT}):")
    lines += [f"  {s.lines:5d}  {s.where}" for s in functions[:top]]
    lines.append(f"{UNTYPED}: " + ", ".join(f"{p} {n}" for p, n in untyped_counts(root).items()))
    over = over_limits(root)
    lines.append(f"over a limit: {len(over)}")
    lines += [f"  {o}" for o in over]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a module or function is over its limit")
    parser.add_argument("--top", type=int, default=5, help="how many of the longest to list (default 5)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check:
        over = over_limits(args.root)
        for line in over:
            print(f"code_sizes: {line}", file=sys.stderr)
        return 1 if over else 0
    print(report(args.root, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
