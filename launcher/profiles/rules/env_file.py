"""The plan's environment as the server gets it: profile.env, applied by sitecustomize in every Python process."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles import env_file
from launcher.profiles.rules.context import Context, Finding


def env_file_size(ctx: Context) -> Iterator[Finding]:
    """A profile.env sitecustomize would ignore (over env_file.MAX_BYTES), or an entry no process could be exec'd
    with (over Linux's MAX_ARG_STRLEN): the server would start without the profile's env, or not at all, and the
    switch roll back. Refused before anything runs."""
    env = {k: str(v) for k, v in ctx.env.items()}
    longest = max(env, key=lambda k: len(k) + len(env[k].encode("utf-8", "surrogatepass")), default=None)
    total = env_file.size(ctx.resolved.name, ctx.spec, env)
    if total > env_file.MAX_BYTES:
        yield ctx.finding(
            "error", "env_file_size", f"env.{longest}",
            f"the plan's environment is {total} bytes as profile.env, over the {env_file.MAX_BYTES} bytes "
            "sitecustomize applies (sitecustomize/sitecustomize.py ignores a larger file whole, so the server would "
            f"start without any of it and the switch roll back); shorten the [env] values, the longest first ({longest})",
        )
    for key, value in env.items():
        entry = len(key) + 1 + len(value.encode("utf-8", "surrogatepass"))
        if entry > env_file.MAX_ENTRY_BYTES:
            yield ctx.finding(
                "error", "env_file_size", f"env.{key}",
                f"{key} is {entry} bytes as NAME=value, over the {env_file.MAX_ENTRY_BYTES} bytes Linux execs a "
                "process with (MAX_ARG_STRLEN): SGLang's launcher and its workers could not start and the switch "
                "would roll back; shorten the value",
            )
