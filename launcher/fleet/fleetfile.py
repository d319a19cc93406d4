"""The fleet file (TOML): the router in front, and each host's server and control API.

    [router]
    url = "http://127.0.0.1:30080"          # where clients reach the fleet
    prometheus = "127.0.0.1:29000"          # optional; the router's own exporter (loopback by default)

    [[host]]
    name = "gpu-a"
    server = "http://10.0.0.11:30000"       # the SGLang server, as the router reaches it
    control = "http://10.0.0.11:30100"      # the kit's control API on that host
    token_env = "GPU_A_CONTROL_TOKEN"   # optional; default KIT_CONTROL_TOKEN

Validated like a profile: a bad file exits 2 naming the file and the key.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from launcher import settings
from launcher.errors import UserError, validated

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _matching(pattern: re.Pattern[str], what: str):
    """A validator: the whole value matches `pattern`, else the error says what the value must be."""
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r}: {what}")
        return value

    return AfterValidator(check)


def normalise_url(value: str) -> str:
    """scheme://host:port with nothing after it: the router stores worker URLs as given, so one
    spelling per server is what makes add, remove and lookup agree."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host, e.g. http://10.0.0.11:30000")
    if "@" in parts.netloc:  # the spelling below would drop them, and the router would never send them
        raise ValueError("has user credentials (user:password@); give scheme://host:port only: the control "
                         "API's token comes from token_env, and the router sends no credentials")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{value!r} has a path or query; give scheme://host:port only")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r} has an invalid port") from exc
    if port == 0:
        raise ValueError(f"{value!r} has port 0; give the port the service listens on (1-65535)")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}:{port or (443 if parts.scheme == 'https' else 80)}"


# Every URL of the file, normalised where it is read: one spelling per server.
Url = Annotated[str, AfterValidator(normalise_url)]


class Router(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Url
    prometheus: str = "127.0.0.1:29000"

    @field_validator("prometheus")
    @classmethod
    def _hostport(cls, v: str) -> str:
        split_hostport(v)
        return v

    @model_validator(mode="after")
    def _ports_apart(self) -> Router:
        """The exporter and the router on one address and port: the second bind fails at start."""
        host, port = split_hostport(self.prometheus)
        if port == self.port and _may_collide(host, self.host):
            raise ValueError(f"router.prometheus {self.prometheus!r} is the port of router.url {self.url!r}; "
                             "give the exporter a port of its own")
        return self

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 80

    @property
    def prometheus_host(self) -> str:
        """The exporter's address as a socket and the router take it: an IPv6 one without brackets."""
        return split_hostport(self.prometheus)[0]

    @property
    def prometheus_port(self) -> int:
        return split_hostport(self.prometheus)[1]


def split_hostport(value: str) -> tuple[str, int]:
    """host:port or [IPv6]:port; ValueError with an example otherwise (a bare IPv6 address is ambiguous)."""
    example = "e.g. 127.0.0.1:29000 or [::1]:29000"
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or not host or "]" in host:
            raise ValueError(f"{value!r} is not [IPv6]:port, {example}")
    else:
        host, sep, port = value.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{value!r} is not host:port, {example}")
        if ":" in host:
            raise ValueError(f"{value!r}: put an IPv6 address in brackets, {example}")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: the port must be 1-65535, {example}")
    return host, int(port)


def _may_collide(a: str, b: str) -> bool:
    """Could two listeners on these addresses take the same socket? The same address, a wildcard, or
    localhost beside a loopback address it may resolve to."""
    a, b = a.lower(), b.lower()
    pair = {a, b}
    return a == b or bool(pair & {"0.0.0.0", "::", ""}) or ("localhost" in pair and bool(pair & {"127.0.0.1", "::1"}))


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, _matching(_NAME, "use 1-64 of a-z 0-9 . _ -, starting with a letter or digit")]
    server: Url
    control: Url
    token_env: Annotated[str, _matching(_ENV, "not an environment variable name")] = settings.KIT_CONTROL_TOKEN.name

    def token(self) -> str | None:
        return os.environ.get(self.token_env) or None

    def url_from(self) -> str:
        """Where this host's control URL comes from, for a message when it does not answer."""
        return f"`control` of host {self.name} in the fleet file"


class Fleet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    router: Router
    host: list[Host] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Fleet:
        for attr in ("name", "server", "control"):
            seen: set[str] = set()
            for i, h in enumerate(self.host):
                value = getattr(h, attr)
                if value in seen:
                    raise ValueError(f"host[{i}].{attr} {value!r} appears twice; each host needs its own")
                seen.add(value)
        if self.router.url in {h.server for h in self.host}:
            raise ValueError(f"router.url {self.router.url!r} is also a host's server")
        return self

    def by_name(self, name: str) -> Host:
        for h in self.host:
            if h.name == name:
                return h
        raise UserError(f"no host named {name!r} in the fleet; hosts: {', '.join(h.name for h in self.host)}")


def load(path: str | Path) -> Fleet:
    """Read and validate a fleet file; UserError (exit 2) names the file, the key and the fix."""
    p = Path(path)
    try:
        raw = tomllib.loads(_read_regular(p).decode("utf-8"))
    except FileNotFoundError as exc:
        raise UserError(f"{p}: fleet file not found; write one as in docs/fleet.md") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read the fleet file ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{p}: TOML syntax error: {exc}; fix the line and retry") from exc
    hints = {"extra_forbidden": "remove it; a fleet file has [router] (url, prometheus) and [[host]] "
             "tables (name, server, control, token_env)", "missing": "add it (see docs/fleet.md)"}
    return validated(Fleet, raw, p, hints, "see docs/fleet.md")


def _read_regular(p: Path) -> bytes:
    """The file's bytes, if it is a regular file: opened without blocking and checked on the open
    descriptor, so a FIFO or a device is refused (UserError) instead of hanging the command."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{p}: not a regular file; give the path of a fleet file (TOML, see docs/fleet.md)")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def require_tokens(fleet: Fleet, hosts: list[Host] | None = None) -> None:
    """Every host's control token must be set before anything is switched (exit 2 names the variable)."""
    missing = sorted({h.token_env for h in (hosts or fleet.host) if not h.token()})
    if missing:
        raise UserError(f"{', '.join(missing)} not set: the control API token of "
                        f"{', '.join(h.name for h in (hosts or fleet.host) if h.token_env in missing)}; "
                        "export it (or name another variable with token_env)")
