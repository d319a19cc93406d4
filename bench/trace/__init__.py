"""Trace analysis: classify GPU kernels, measure communication per decode/verify step, give a verdict."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point for `bench trace ...` (kept light: the CLI module is imported on call)."""
    from bench.trace.cli import main as cli_main

    return cli_main(argv)
