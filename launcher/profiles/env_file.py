"""The env file every Python process of the server applies at start-up (profile.env, read by
sitecustomize/sitecustomize.py): its text, and the limits past which the server would never get it.

sitecustomize ignores a file larger than its `_MAX_BYTES` whole (it may import nothing of the kit, so
tests/launcher/profiles/test_env_file.py pins the two constants equal), and Linux refuses to exec a process one of whose
environment entries is MAX_ARG_STRLEN (32 pages: 131072 bytes) or longer, counting its NUL: SGLang's
launcher, exec'd by server_exec after sitecustomize applied the file, and each TP worker it spawns.
Either way the switch rolls back after the server failed to start; the `env_file_size` rule
(rules/env_file.py) refuses such a plan at `launcher check`, /check and /switch instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher import settings

MAX_BYTES = 1 << 20  # sitecustomize's _MAX_BYTES: a larger profile.env is ignored whole
MAX_ENTRY_BYTES = (32 * 4096) - 1  # one NAME=value entry, without its NUL: Linux's MAX_ARG_STRLEN less one


def entries(name: str, spec: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The file's NAME=value entries, in order: the active profile and spec, then the plan's env by name."""
    return [(settings.KIT_ACTIVE_PROFILE.name, name), (settings.KIT_ACTIVE_SPEC.name, spec), *sorted(env.items())]


def text(name: str, spec: str, env: Mapping[str, str]) -> str:
    """profile.env: NUL-separated NAME=value entries."""
    return "".join(f"{k}={v}\0" for k, v in entries(name, spec, env))


def size(name: str, spec: str, env: Mapping[str, str]) -> int:
    """The file's size in bytes, as sitecustomize measures it."""
    return len(text(name, spec, env).encode("utf-8", "surrogatepass"))
