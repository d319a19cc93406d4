"""The shape every bench subcommand shares: a dataclass of its flags (`*Args`), built from argparse.

`add_cli_args(parser)` declares the flags, `from_cli_args(namespace)` turns the parsed namespace into
the typed dataclass, and the command's work functions take keyword arguments, never a namespace, so
they can be called from Python (tools/, tests) without going through argparse.

The flags `bench run` and `bench tune` both take are declared once here, each a `Flag` (name, how
argparse reads it, its help); a command adds one with its own default (`Flag.add`), and with its own
help only where the flag means something else there. `http_url`, `positive_ints` and `temperature` check
three of them; bench/client/workload.py `choose_prompts` checks `--prompts` with `--num-prompts`.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ClassVar, TypeVar

from bench.client.server_client import APIS
from bench.client.workload import WORKLOADS
from launcher import settings
from launcher.errors import UserError, run_cli

T = TypeVar("T", bound="CliArgs")
_SAME = object()  # Flag.add: the flag's own help


@dataclass(frozen=True)
class Flag:
    """One flag of more than one bench command. `help` may name the command's default as `{default}`
    (`{default:g}` for a number of seconds)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    switch: bool = False  # store_true: given or not, no value
    metavar: str | None = None

    def add(self, parser: argparse.ArgumentParser, default: Any = None, *, help: Any = _SAME) -> None:  # noqa: A002
        """Declare the flag on `parser` with the command's `default` and, where the flag means something else
        for that command, its own `help`."""
        text = (self.help if help is _SAME else help or "").format(default=default) or None
        if self.switch:
            parser.add_argument(self.name, action="store_true", help=text)
            return
        parser.add_argument(self.name, type=self.type, choices=self.choices, default=default, metavar=self.metavar,
                            help=text)


URL = Flag("--url", f"SGLang server URL (default ${settings.KIT_SERVER_URL.name} or {settings.KIT_SERVER_URL.default})")
CONTROL = Flag("--control", "control API URL (default: $KIT_CONTROL_URL or http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT); "
                            "profile and spec names and the running plans come from it")
PROFILES = Flag("--profiles", "comma-separated profile names")
SPEC = Flag("--spec", "comma-separated spec modes (default {default})")
EAGLE3 = Flag("--eagle3", "EAGLE-3 points (steps, top-k, draft tokens)", metavar="S,K,D[;S,K,D...]")
CONCURRENCY = Flag("--concurrency", "comma-separated concurrency levels (default {default})")
NUM_PROMPTS = Flag("--num-prompts", "requests per repeat (default {default}; with --prompts, every prompt of the file)",
                   type=int)
PROMPTS = Flag("--prompts", 'your own prompts: a JSONL file, one {{"id": ..., "text": ...}} or {{"id": ..., '
                            '"messages": [{{"role", "content"}}, ...]}} per line (id optional); the first --num-prompts '
                            "of it are sent (docs/bench.md)", metavar="FILE")
TEMPERATURE = Flag("--temperature", "sampling temperature of the timed requests (default {default:g}, greedy); the "
                                    "correctness pass is always greedy", type=float)
MAX_TOKENS = Flag("--max-tokens", "max new tokens per request (default {default})", type=int)
WORKLOAD = Flag("--workload", "bundled chat-templated prompts (default) or seeded random words", choices=WORKLOADS)
API = Flag("--api", "SGLang native /generate (default; per-request spec_verify_ct) or OpenAI chat", choices=APIS)
WARMUP = Flag("--warmup", "uncounted warm-up requests after each switch (default {default})", type=int)
SEED = Flag("--seed", "seed of the random workload (default {default})", type=int)
SWITCH_TIMEOUT = Flag("--switch-timeout", "seconds a switch (restart + health gate) may take (default {default:g})",
                      type=float)
HEALTH_TIMEOUT = Flag("--health-timeout", "seconds to wait for /health after a switch or restart (default {default:g})",
                      type=float)
OUT = Flag("--out", "results folder")
FLEET = Flag("--fleet", "fleet file")


def http_url(flag: str, value: str) -> str:
    """`--url` / `--control`: an http(s) URL without its trailing slash; UserError naming the flag otherwise."""
    if not value.startswith(("http://", "https://")):
        raise UserError(f"{flag} '{value}': give an http(s) URL such as http://127.0.0.1:30000")
    return value.rstrip("/")


def temperature(flag: str, value: float) -> float:
    """`--temperature`: a finite number >= 0; UserError naming the flag otherwise."""
    if not (math.isfinite(value) and value >= 0):
        raise UserError(f"{flag} {value:g}: give a finite number 0 or more (0, the default, is greedy)")
    return float(value)


def positive_ints(flag: str, value: str) -> list[int]:
    """`1,4,16` -> [1, 4, 16] (`--concurrency`); UserError naming the flag for anything but whole numbers >= 1."""
    try:
        nums = [int(v) for v in (v.strip() for v in value.split(",")) if v]
    except ValueError as exc:
        raise UserError(f"{flag} '{value}': give whole numbers separated by commas, e.g. {flag} 1,4,16") from exc
    if not nums or any(n < 1 for n in nums):
        raise UserError(f"{flag} '{value}': every value must be at least 1")
    return nums


class CliArgs:
    """Mixin for a subcommand's `*Args` dataclass; `prog` and `description` name its parser."""

    prog: ClassVar[str] = "bench"
    description: ClassVar[str | None] = None
    parser_options: ClassVar[dict[str, Any]] = {}

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        raise NotImplementedError

    @classmethod
    def from_cli_args(cls: type[T], args: argparse.Namespace) -> T:
        """Each dataclass field from the namespace attribute of the same name."""
        assert is_dataclass(cls)
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if f.init})

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """The subcommand's own parser, as `bench COMMAND --help` shows it."""
        p = argparse.ArgumentParser(prog=cls.prog, description=cls.description, **cls.parser_options)
        return cls.add_cli_args(p)

    @classmethod
    def parse(cls: type[T], argv: list[str] | None) -> T:
        """Parse argv (exit 2 on a malformed flag, as argparse does) into the dataclass."""
        return cls.from_cli_args(cls.parser().parse_args(argv))


@dataclass(kw_only=True)
class TargetArgs:
    """The fields of the flags that `bench run` and `bench tune` share with the same default: the server and control
    API URLs (None: from the environment), the `--eagle3` points and the `--concurrency` levels, as given."""

    url: str | None = None
    control: str | None = None
    eagle3: str | None = None
    concurrency: str = "1"


def entry_point(args_type: type[T], work: Callable[[T], int]) -> Callable[[list[str] | None], int]:
    """A subcommand's `main(argv)`: parse argv into its `*Args`, run `work`, and map kit errors to one
    stderr line and an exit code (run_cli), so no command writes that sequence again."""

    def main(argv: list[str] | None = None) -> int:
        args = args_type.parse(argv)
        return run_cli(lambda: work(args))

    main.__doc__ = f"Entry point for `{args_type.prog} ...`."
    return main


def print_result(result: dict[str, Any], *, as_json: bool, render: Callable[[dict[str, Any]], None]) -> int:
    """`--json` prints the result as JSON; otherwise `render` prints it for a person. Exit 0."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        render(result)
    return 0


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_interrupt(*, sigterm: bool = False) -> None:
    """Ctrl-C (SIGINT), and with `sigterm` SIGTERM too, raise KeyboardInterrupt, so the command's own
    stop path runs (partial bundle, production put back): also when it was started in the background
    by a shell that ignores SIGINT for its jobs, where Python would otherwise leave SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if sigterm:
        signal.signal(signal.SIGTERM, _raise_interrupt)
