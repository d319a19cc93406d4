"""The flags of the bench commands, each declared once, and the shape every bench subcommand shares.

`bench run` and `bench tune` declare each flag once, as a field of their settings dataclass
(bench/run/settings.py `RunSettings`, bench/tune/settings.py `TuneSettings`): its type, its default and a
`Flag` in the field's metadata (the flag's name, how argparse reads it, its help, and `check`, which turns
the value given into the field's value or exits 2 naming the flag and the fix). `Command` builds the parser
from those fields; the flags both commands take are the `Flag`s below, each field taking one with its own
default (`Flag(default)`), and with its own help only where the flag means something else there
(`extend=` adds to it, `help=` replaces it). bench/flag_docs.py writes the option tables of docs/bench.md
and docs/tune.md from the same fields.

The other subcommands keep a dataclass of their flags (`CliArgs`): `add_cli_args(parser)` declares the
flags, `from_cli_args(namespace)` turns the parsed namespace into the dataclass, and their work functions
take keyword arguments, never a namespace, so they can be called from Python (tools/, tests).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, Generic, TypedDict, TypeVar

from bench.client import arrivals
from bench.client.server_client import APIS
from bench.client.workload import WORKLOADS
from launcher import settings
from launcher.errors import UserError, run_cli
from launcher.profiles import spec_params

T = TypeVar("T", bound="CliArgs")
S = TypeVar("S")
R = TypeVar("R", bound=Mapping[str, object])  # a command's result as JSON
_SAME: Any = object()  # Flag.add: the flag's own help
FLAG_KEY = "flag"  # a settings field's metadata key for its Flag


@dataclass(frozen=True)
class Flag:
    """One flag. `help` may name the command's default as `{default}` (`{default:g}` for a number of seconds);
    `shown` is that default where the field's own default is not what the user would type (a list, a
    value from the environment). `given` is the command line's default where the field holds the
    checked form of it (`--concurrency 1` -> [1]); `check(flag, value)` turns a value given into the field's
    value, raising UserError naming the flag and the fix."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    switch: bool = False  # store_true: given or not, no value
    metavar: str | None = None
    shown: Any = None
    given: Any = None
    check: Callable[[str, Any], Any] | None = None

    def __call__(self, default: Any = MISSING, *, extend: str = "", **changes: Any) -> Any:
        """A dataclass field that is this flag, with the command's `default` and what differs for it there
        (`extend`: words added to the help; `help`, `shown`, ...: replaced). Without a default, the field's
        default is `given` checked, or none (the command fills it in)."""
        flag = replace(self, **{**changes, "help": changes.get("help", self.help) + extend})
        if default is MISSING and flag.given is not None and flag.check is not None:
            value = flag.check(flag.name, flag.given)
            return field(default_factory=lambda: value, metadata={FLAG_KEY: flag})
        return field(default=default, metadata={FLAG_KEY: flag})

    def add(self, parser: argparse.ArgumentParser, default: Any = None, *, help: Any = _SAME,  # noqa: A002
            dest: str | None = None, shown: Any = _SAME) -> None:
        """Declare the flag on `parser` with `default` (what argparse stores when it is left out) and, where the
        flag means something else for that command, its own `help`; the help names `shown` (default: `default`)."""
        text = (self.help if help is _SAME else help or "").format(default=default if shown is _SAME else shown) or None
        extra = {"dest": dest} if dest else {}
        if self.switch:
            parser.add_argument(self.name, action="store_true", help=text, **extra)
            return
        own = self.name[2:].replace("-", "_")  # argparse's own dest: its metavar from the flag, not the field
        metavar = self.metavar or (own.upper() if dest and dest != own and not self.choices else None)
        parser.add_argument(self.name, type=self.type, choices=self.choices, default=default, metavar=metavar,
                            help=text, **extra)


def option(name: str, default: Any = MISSING, *, help: str, **kw: Any) -> Any:  # noqa: A002
    """A field that is a flag of one command only: `type` from the default (int, float; False: a switch)."""
    if "type" not in kw and isinstance(default, (int, float)) and not isinstance(default, bool):
        kw["type"] = type(default)
    return Flag(name, help, switch=default is False, **kw)(default)


def flag_fields(settings_type: type) -> Iterator[tuple[Field, Flag]]:
    """The fields of a settings dataclass that are flags, in declaration order, each with its Flag."""
    for f in fields(settings_type):
        if FLAG_KEY in f.metadata:
            yield f, f.metadata[FLAG_KEY]


def default_of(f: Field, flag: Flag) -> Any:
    """The default as the help and the docs say it: `shown`, the command line's `given`, or the field's own."""
    if flag.shown is not None:
        return flag.shown
    if flag.given is not None:
        return flag.given
    return f.default_factory() if f.default_factory is not MISSING else (None if f.default is MISSING else f.default)


class Given(argparse.Namespace):
    """The flags as given (None: left out); `settings(argv)` checks them into the command's settings (exit 2)."""

    _command: Command[Any]

    def settings(self, argv: list[str]) -> Any:
        return self._command.build(self, argv)

    def checked(self) -> dict[str, Any]:
        """Each flag given (or with a command-line default), as its field holds it: `check`ed, naming the flag. The
        settings dataclass's keyword arguments: each value has its own field's type."""
        out = {}
        for f, flag in flag_fields(self._command.settings_type):
            value = getattr(self, f.name, None)
            if value is not None and not (flag.switch and value is False):
                out[f.name] = flag.check(flag.name, value) if flag.check else value
        return out


class Command(Generic[S]):
    """A command whose flags are the Flag fields of its settings dataclass; `build(given, argv)` checks the
    flags that depend on each other and returns the settings."""

    def __init__(self, settings_type: type[S], prog: str, description: str,
                 build: Callable[[Given, list[str]], S]) -> None:
        self.settings_type, self.prog, self.description, self.build = settings_type, prog, description, build

    def parser(self) -> argparse.ArgumentParser:
        """The command's parser, as `bench COMMAND --help` shows it: a value left out is None (or `given`)."""
        p = argparse.ArgumentParser(prog=self.prog, description=self.description)
        for f, flag in flag_fields(self.settings_type):
            flag.add(p, flag.given, dest=f.name, shown=default_of(f, flag))
        return p

    def parse(self, argv: list[str] | None) -> Given:
        """Parse argv (exit 2 on a malformed flag, as argparse does) into the flags as given."""
        given = Given(_command=self)
        return self.parser().parse_args(argv, namespace=given)


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


def at_least(low: int) -> Callable[[str, int], int]:
    """A count's check: `low` (0 or 1) or more; UserError naming the flag otherwise."""
    def check(flag: str, value: int) -> int:
        if value < low:
            raise UserError(f"{flag} {value}: must be " + ("at least 1" if low else "0 or more"))
        return value
    return check


def seconds(flag: str, value: float) -> float:
    """A time limit: a finite number of seconds > 0; UserError naming the flag otherwise."""
    if not 0 < value < math.inf:
        raise UserError(f"{flag} {value}: must be a positive number of seconds")
    return value


def rates(flag: str, value: str) -> list[float]:
    """`--request-rate 0.5,1,2`: open-loop request rates, requests/s (bench/client/arrivals.py)."""
    return arrivals.parse_rates(value, flag)


def burstiness(flag: str, value: float) -> float:
    """`--burstiness`: the gamma shape of the gaps between arrivals, a finite number > 0 (1: Poisson)."""
    if not 0 < value < math.inf:
        raise UserError(f"{flag} {value}: give a number above 0 (1, the default, is a Poisson process; below 1 "
                        "burstier, above 1 more regular)")
    return float(value)


def points(flag: str, value: str) -> list[spec_params.SpecParams]:
    """`--eagle3 S,K,D;S,K,D`: each point checked as every flag that takes one checks it."""
    return spec_params.parse_list(value, flag)


def endpoints(given: Mapping[str, object]) -> dict[str, str]:
    """`url` and `control` as given (checked: `Given.checked`), else from the environment (KIT_SERVER_URL,
    KIT_CONTROL_*)."""
    return {"url": str(given.get("url") or settings.KIT_SERVER_URL.get()),
            "control": str(given.get("control") or settings.control_url())}


# ---- the flags bench run and bench tune both take ----------------------------------------------------------
URL = Flag("--url", "SGLang server URL (default {default})", check=http_url,
           shown=f"${settings.KIT_SERVER_URL.name} or {settings.KIT_SERVER_URL.default}")
CONTROL = Flag("--control", "control API URL (default {default}); profile and spec names and the running plans come "
                            "from it", shown="$KIT_CONTROL_URL or http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT",
               check=http_url)
PROFILES = Flag("--profiles", "comma-separated profile names")
SPEC = Flag("--spec", "comma-separated spec modes (default {default})")
EAGLE3 = Flag("--eagle3", "EAGLE-3 points (steps, top-k, draft tokens)", metavar="S,K,D[;S,K,D...]", check=points)
CONCURRENCY = Flag("--concurrency", "comma-separated concurrency levels (default {default})", given="1",
                   check=positive_ints)
NUM_PROMPTS = Flag("--num-prompts", "requests per repeat (default {default}; with --prompts, every prompt of the file)",
                   type=int)
PROMPTS = Flag("--prompts", 'your own prompts: a JSONL file, one {{"id": ..., "text": ...}} or {{"id": ..., '
                            '"messages": [{{"role", "content"}}, ...]}} per line (id optional); the first --num-prompts '
                            "of it are sent (docs/bench.md)", metavar="FILE")
TEMPERATURE = Flag("--temperature", "sampling temperature of the timed requests (default {default:g}, greedy); the "
                                    "correctness pass is always greedy", type=float, check=temperature)
MAX_TOKENS = Flag("--max-tokens", "max new tokens per request (default {default})", type=int, check=at_least(1))
WORKLOAD = Flag("--workload", "bundled chat-templated prompts (default) or seeded random words", choices=WORKLOADS)
API = Flag("--api", "SGLang native /generate (default; per-request spec_verify_ct) or OpenAI chat", choices=APIS)
WARMUP = Flag("--warmup", "uncounted warm-up requests after each switch (default {default})", type=int,
              check=at_least(0))
SEED = Flag("--seed", "seed of the random workload (default {default})", type=int)
SWITCH_TIMEOUT = Flag("--switch-timeout", "seconds a switch (restart + health gate) may take (default {default:g})",
                      type=float, check=seconds)
HEALTH_TIMEOUT = Flag("--health-timeout", "seconds to wait for /health after a switch or restart (default {default:g})",
                      type=float, check=seconds)
OUT = Flag("--out", "results folder")
FLEET = Flag("--fleet", "fleet file")


class ParserOptions(TypedDict, total=False):
    """The `argparse.ArgumentParser` options a subcommand sets besides its `prog` and `description`."""

    epilog: str
    formatter_class: type[argparse.HelpFormatter]
    allow_abbrev: bool


class CliArgs:
    """Mixin for a subcommand's `*Args` dataclass; `prog` and `description` name its parser."""

    prog: ClassVar[str] = "bench"
    description: ClassVar[str | None] = None
    parser_options: ClassVar[ParserOptions] = {}

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


def entry_point(args_type: type[T], work: Callable[[T], int]) -> Callable[[list[str] | None], int]:
    """A subcommand's `main(argv)`: parse argv into its `*Args`, run `work`, and map kit errors to one
    stderr line and an exit code (run_cli), so no command writes that sequence again."""

    def main(argv: list[str] | None = None) -> int:
        args = args_type.parse(argv)
        return run_cli(lambda: work(args))

    main.__doc__ = f"Entry point for `{args_type.prog} ...`."
    return main


def print_result(result: R, *, as_json: bool, render: Callable[[R], None]) -> int:
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
