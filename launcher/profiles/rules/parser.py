"""Server flags through SGLang's own argument parser (only when it is importable)."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


def sglang_flags(ctx: Context) -> Iterator[Finding]:
    """(e) Unknown, abbreviated, aliased or deprecated flags, and values SGLang's parser rejects."""
    from launcher.profiles import sglang_args

    for flag, message in sglang_args.flag_problems(ctx.flags):
        key = f"server.{flag[2:]}" if flag else "server"
        yield ctx.finding("error", "sglang_flags", key, message)
