"""`.env.example` and `docs/settings.md`, generated from the settings registry so they cannot drift.

`launcher settings` prints the table; `launcher settings --write` rewrites both files (`make docs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher import settings
from launcher.atomic import write_text
from launcher.errors import run_cli

ENV_EXAMPLE = ".env.example"
SETTINGS_MD = "docs/settings.md"
_HEADER = """\
# Generated from launcher/settings.py by `make docs`; edit the registry, not this file.
# Copy to .env and edit: cp .env.example .env
# docker compose and the Makefile both read .env; a variable set in the shell wins over it.
# Plain KEY=value lines only (no spaces around =, no quotes needed). Empty means unset.
"""


def _wrap(text: str, width: int = 98) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return [*lines, cur] if cur else lines


def env_example() -> str:
    """The settings a user sets in .env, grouped, each with its doc line and default."""
    out = [_HEADER]
    for group in settings.GROUP_ORDER:
        rows = [s for s in settings.REGISTRY.values() if s.group == group and s.example is not None]
        if not rows:
            continue
        out.append(f"\n# ---- {group} ----\n")
        for s in rows:
            doc = s.doc + (f" Default: {s.shown_default}." if s.shown_default else "")
            out.extend(f"# {line}\n" for line in _wrap(doc))
            out.append(f"{s.name}={s.example}\n")
    return "".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    lines = [
        "# Settings",
        "",
        "Generated from `launcher/settings.py` by `make docs`; a test fails when this file drifts.",
        "Every environment variable the kit reads. An empty value means unset. A bad value stops a",
        "server-side process before it starts anything, and makes a client command exit 2, naming the",
        "variable, the value and what is expected. Secret values are never printed.",
        "",
        "Scopes: `server` (the server container's processes), `profile` (a built-in profile reads it as",
        "`${NAME:-default}`), `client` (host-side and bench commands), `compose` and `build` (only docker",
        "compose or `make build` read it), `test` (a test hook).",
        "",
    ]
    for group in settings.GROUP_ORDER:
        rows = [s for s in settings.REGISTRY.values() if s.group == group]
        lines += [f"## {group}", "", "| name | type | default | scope | secret | meaning |", "|---|---|---|---|---|---|"]
        for s in rows:
            default = f"`{s.shown_default}`" if s.shown_default else ""
            lines.append(
                f"| `{s.name}` | {_cell(s.kind.expected)} | {_cell(default)} | {' '.join(s.scope)} | "
                f"{'yes' if s.secret else ''} | {_cell(s.doc)} |"
            )
        lines.append("")
    return "\n".join(lines)


def as_json() -> list[dict[str, object]]:
    return [
        {"name": s.name, "type": s.kind.expected, "default": s.shown_default or None, "group": s.group,
         "scope": list(s.scope), "secret": s.secret, "doc": s.doc}
        for s in settings.REGISTRY.values()
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher settings", description="every environment setting the kit reads")
    p.add_argument("--json", action="store_true", help="the registry as JSON")
    p.add_argument("--write", metavar="ROOT", nargs="?", const=".",
                   help=f"rewrite {ENV_EXAMPLE} and {SETTINGS_MD} under ROOT (default .)")
    p.add_argument("--check", action="store_true", help="exit 2 when a setting in this environment has a bad value")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        if args.check:
            settings.check(settings.SCOPES)
            print("every set variable has a valid value")
        elif args.write:
            root = Path(args.write)
            for rel, text in ((ENV_EXAMPLE, env_example()), (SETTINGS_MD, markdown())):
                write_text(root / rel, text)
                print(root / rel)
        elif args.json:
            print(json.dumps(as_json(), indent=2))
        else:
            print(markdown())
        return 0

    return run_cli(body)
