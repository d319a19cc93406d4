"""`${NAME}` / `${NAME:-default}` expansion for profile values."""

from __future__ import annotations

import re
from collections.abc import Mapping

from launcher.errors import UserError
from launcher.profiles import policy

_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class UnsetVariable(UserError):
    """A reference to an unset variable without a default; `resolve` reports all of them at once."""


class Placeholders(dict):
    """Environment stand-in for `check`: every unset variable expands to `<NAME>`."""

    def __init__(self, base: Mapping[str, str]):
        super().__init__(base)
        self.used: set[str] = set()

    def __missing__(self, key: str) -> str:
        self.used.add(key)
        return f"<{key}>"


def expand(value: str, environ: Mapping[str, str], where: str) -> str:
    """Expand references in one value; `where` names the file and key for the error message."""

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        refused = policy.reference_refused(name)
        if refused:
            raise UserError(
                f"{where}: references {name}, but {refused}; a profile reaches the server's command line, "
                "files and logs, so it may not read it: remove the reference"
            )
        if name in environ and environ[name] != "":
            return environ[name]
        if default is not None:
            return default
        if isinstance(environ, Placeholders):
            return environ[name]
        raise UnsetVariable(
            f"{where}: environment variable {name} is not set; put {name}=... in .env "
            f"(cp .env.example .env), or export {name}=..."
        )

    return _PATTERN.sub(repl, value)
