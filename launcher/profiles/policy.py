"""What a profile may be called, set and reference: the line between the kit's settings and a profile.

A profile's [env] reaches the server's processes, and its ${VAR} references reach argv, state files
and logs. The kit's own names are off limits to both, so a profile can never change the control
token, the state directory or the way sitecustomize finds the plan.
"""

from __future__ import annotations

from launcher import settings

NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,63}"  # profile and spec names: also their file names
RESERVED_ENV_PREFIX = "KIT_"  # the kit's namespace, registered or not
PROCESS_ENV_NAMES = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"})  # would unhook sitecustomize


def reserved_env_reason(name: str) -> str | None:
    """Why a profile's [env] may not set `name`, or None when it may."""
    if name in settings.REGISTRY:
        return f"{name} is one of the kit's own settings (docs/settings.md)"
    if name.startswith(RESERVED_ENV_PREFIX):
        return f"the {RESERVED_ENV_PREFIX} prefix is reserved for the kit"
    if name in PROCESS_ENV_NAMES:
        return f"{name} decides which code the server runs and is set by the kit"
    return None


def reference_refused(name: str) -> str | None:
    """Why a profile's ${name} may not be expanded, or None when it may (profile-scoped settings and
    variables outside the registry)."""
    s = settings.REGISTRY.get(name)
    if s is None:
        return None
    if s.secret:
        return f"{name} is a secret"
    if "profile" not in s.scope:
        return f"{name} is a kit setting that profiles may not read (scope: {', '.join(s.scope)})"
    return None
