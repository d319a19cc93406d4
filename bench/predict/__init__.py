"""Verify cost model: what verify time, speculative tok/s and break-even accept length to expect."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point for `bench predict ...` (the CLI module is imported on call)."""
    from bench.predict.cli import main as cli_main

    return cli_main(argv)
