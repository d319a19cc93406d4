"""The option tables of docs/bench.md, docs/tune.md and docs/sla.md, generated from the flags' declarations (the
fields of bench/run/settings.py `RunSettings`, bench/tune/settings.py `TuneSettings` and bench/sla/settings.py
`SlaSettings`) so they cannot drift.

`python -m bench.flag_docs` prints them; `--write` rewrites them in place, between their markers (`make docs`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bench.args import Command, default_of, flag_fields
from launcher.atomic import write_text
from launcher.errors import UserError, run_cli

DOCS = {"bench run": "docs/bench.md", "bench tune": "docs/tune.md", "bench sla": "docs/sla.md"}
_MARK = "\0"  # where the help names the default: the default column says it instead


class _Default:
    def __format__(self, spec: str) -> str:
        return _MARK


def commands() -> dict[str, Command]:
    from bench.run.cli import RunArgs
    from bench.sla.cli import SlaArgs
    from bench.tune.cli import TuneArgs

    return {c.prog: c for c in (RunArgs, TuneArgs, SlaArgs)}


def _default(value: object, switch: bool) -> str:
    if switch:
        return "off"
    if value is None:
        return "none"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"`{value}`"


def rows(command: Command) -> list[tuple[str, str, str]]:
    """(flag, default, meaning) per flag, in the order `--help` lists them; the meaning is the help without
    the default it names."""
    out = []
    for f, flag in flag_fields(command.settings_type):
        default = default_of(f, flag)
        text = flag.help.format(default=_Default())
        text = re.sub(f" ?\\(default '?{_MARK}'?\\)", "", text).replace(f"(default {_MARK}; ", "(")
        text = text.replace(_MARK, str(default))
        name = f"{flag.name} {flag.metavar}" if flag.metavar and not flag.switch else flag.name
        out.append((name, _default(default, flag.switch), text))
    return out


def table(command: Command) -> str:
    lines = [_begin(command.prog), "| option | default | meaning |", "|---|---|---|"]
    for name, default, text in rows(command):
        lines.append(f"| `{name}` | {default} | {text.replace('|', chr(92) + '|')} |")
    return "\n".join([*lines, _end(command.prog)])


def _begin(prog: str) -> str:
    return f"<!-- `{prog}` options: generated from the flags' declarations by `make docs`; edit those, not this -->"


def _end(prog: str) -> str:
    return f"<!-- end of `{prog}` options -->"


def rewritten(text: str, command: Command) -> str:
    """`text` (a doc) with its table of `command`'s options replaced by the generated one."""
    begin, end = _begin(command.prog), _end(command.prog)
    if begin not in text or end not in text:
        raise UserError(f"no generated table of `{command.prog}` options in {DOCS[command.prog]}: put the two marker "
                        f"lines there:\n{begin}\n{end}")
    head, rest = text.split(begin, 1)
    return head + table(command) + rest.split(end, 1)[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flag_docs", description="the option tables of the bench docs")
    p.add_argument("--write", metavar="ROOT", nargs="?", const=".",
                   help=f"rewrite the tables in {' and '.join(DOCS.values())} under ROOT (default .)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        for prog, command in commands().items():
            if args.write:
                path = Path(args.write) / DOCS[prog]
                write_text(path, rewritten(path.read_text(), command))
                print(path)
            else:
                print(table(command), end="\n\n")
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
