"""Post-conditions: AST facts series.toml says must hold in a patched file."""

from __future__ import annotations

import ast
from pathlib import Path

from patches.series import PatchSet, PostCondition


def _identifier(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _check_condition(root: Path, cond: PostCondition) -> str | None:
    """None when the condition holds, else why not."""
    path = root / cond.file
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError) as exc:
        return f"{cond.file}: cannot parse: {exc}"
    scopes: list[ast.AST]
    where = cond.file
    if cond.function:
        scopes = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == cond.function
        ]
        where = f"{cond.file}:{cond.function}()"
        if not scopes:
            return f"{where}: function not found"
    else:
        scopes = [tree]
    for scope in scopes:
        names = {i for n in ast.walk(scope) if (i := _identifier(n))}
        if not set(cond.uses) <= names:
            continue
        if cond.or_group and not any(
            isinstance(n, ast.BoolOp)
            and isinstance(n.op, ast.Or)
            and set(cond.or_group) <= {_identifier(v) for v in n.values}
            for n in ast.walk(scope)
        ):
            continue
        assigned = {
            t.id
            for n in getattr(scope, "body", [])
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        if set(cond.assigns) <= assigned:
            return None
    wanted = []
    if cond.uses:
        wanted.append(f"uses {list(cond.uses)}")
    if cond.or_group:
        wanted.append(f"`or` of {list(cond.or_group)}")
    if cond.assigns:
        wanted.append(f"assigns {list(cond.assigns)}")
    return f"{where}: expected {' and '.join(wanted)} ({cond.why})"


def check_post_conditions(root: Path, patch_set: PatchSet) -> list[str]:
    """Failed post-conditions of every patch, checked on the source under root."""
    return [
        f"{p.name}: {msg}" for p in patch_set.patches for c in p.post if (msg := _check_condition(root, c))
    ]
