"""SGLang 0.5.23's real argument parser, used to check every plan's flags.

Importing sglang takes seconds, so this module is only imported by `check`, `render` and `serve`, and
its verdicts are stored on disk (`flag_verdicts.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import re


class ParserError(Exception):
    pass


def available() -> bool:
    """True when sglang can be imported (without importing it)."""
    return importlib.util.find_spec("sglang") is not None


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise ParserError(message)


@functools.lru_cache(maxsize=1)
def parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: otherwise argparse accepts `--tp` for `--tp-size` (docs/evidence.md, "Serving and measurement").
    from sglang.srt.server_args import ServerArgs

    p = _RaisingParser(prog="sglang.launch_server", allow_abbrev=False, add_help=False)
    ServerArgs.add_cli_args(p)
    return p


def version() -> str | None:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sglang")
    except Exception:
        return None


def _flag_table() -> dict[str, argparse.Action]:
    table = {}
    for action in parser()._actions:
        for opt in action.option_strings:
            table[opt] = action
    return table


def flag_problems(flags: list[str]) -> list[tuple[str, str]]:
    """(flag, message) for each flag that is unknown, an alias, or deprecated, then a full parse; a verdict
    already stored for the same sglang, environment and flags is read back instead (flag_verdicts.py)."""
    from launcher.profiles import flag_verdicts

    return flag_verdicts.verdict(flags, _parse_problems)


def _parse_problems(flags: list[str]) -> list[tuple[str, str]]:
    table = _flag_table()
    problems: list[tuple[str, str]] = []
    for tok in flags:
        if not tok.startswith("--"):
            continue
        name = tok.split("=", 1)[0]
        action = table.get(name)
        if action is None:
            matches = sorted(o for o in table if o.startswith(name))
            if matches:
                problems.append((name, f"abbreviated or ambiguous flag {name} (matches {', '.join(matches[:4])}); write the full name"))
            else:
                problems.append((name, f"SGLang {version()} has no flag {name}"))
            continue
        canonical = action.option_strings[0]
        if "Deprecated" in type(action).__name__ or (action.help or "").lstrip("( ").lower().startswith("deprecated"):
            problems.append((name, f"flag {name} is deprecated in SGLang {version()}: {(action.help or '').strip()}"))
        elif name != canonical:
            problems.append((name, f"flag {name} is an alias; write {canonical}"))
    if not problems:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parser().parse_args(flags)
        except ParserError as exc:
            # argparse names the flag ("argument --mem-fraction-static: invalid float value"): the
            # finding then points at the profile file and key that set it
            named = re.match(r"argument (--[\w-]+)", str(exc))
            flag = named.group(1) if named and named.group(1) in table else ""
            if flag:
                flag = table[flag].option_strings[0]
            problems.append((flag, f"SGLang's parser rejects the command line: {exc}"))
    return problems
