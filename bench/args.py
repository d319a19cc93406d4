"""The shape every bench subcommand shares: a dataclass of its flags (`*Args`), built from argparse.

`add_cli_args(parser)` declares the flags, `from_cli_args(namespace)` turns the parsed namespace into
the typed dataclass, and the command's work functions take keyword arguments, never a namespace, so
they can be called from Python (tools/, tests) without going through argparse.
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar, TypeVar

from launcher.errors import run_cli

T = TypeVar("T", bound="CliArgs")


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
