"""Every environment setting the kit reads, in one typed registry (the shape of SGLang's `environ.py`).

Each setting has a name, a type, a default, one line of documentation and a secret mark. Code reads
a value only through its `Setting` (`settings.STATE_DIR.get()`), so a bad value is handled one way
everywhere: `SettingError` (a `UserError`, exit 2) naming the variable, the value and what is
expected. Server-side processes call `check()` before they start anything and refuse to start.
An empty value means unset, as docker compose passes `${X:-}`.

`.env.example` and `docs/settings.md` are generated from this module
(`python -m launcher settings --write`); a test fails when they drift.
State-file names and log paths live here too (`StatePaths`), so no module spells them twice.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from launcher.errors import UserError

T = TypeVar("T")

# Where a setting is read. `server`: the server container's processes (serve, control API, the SGLang
# program). `profile`: a built-in profile reads it as ${NAME:-default}. `client`: host-side and bench
# commands. `compose`/`build`: only docker compose or `make build` read it. `test`: a test hook.
SCOPES = ("server", "profile", "client", "compose", "build", "test")


class SettingError(UserError):
    """A setting has a value the kit cannot use; nothing was changed."""


# ----- value types: a parser that raises ValueError with what was expected ---------------------------
@dataclass(frozen=True)
class Kind(Generic[T]):
    expected: str
    parse: Callable[[str], T]


def _int(lo: int | None = None) -> Kind[int]:
    def parse(raw: str) -> int:
        value = int(raw.strip())
        if lo is not None and value < lo:
            raise ValueError
        return value

    return Kind(f"a whole number >= {lo}" if lo is not None else "a whole number", parse)


def _seconds(lo_exclusive: float = 0.0) -> Kind[float]:
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not math.isfinite(value) or value <= lo_exclusive:
            raise ValueError
        return value

    return Kind("a finite number of seconds > 0", parse)


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError


def _choice(*options: str) -> Kind[str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError
        return raw

    return Kind("one of " + ", ".join(options), parse)


def _url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")) or len(raw) < 10:
        raise ValueError
    return raw.rstrip("/")


def _path_list(raw: str) -> list[Path]:
    return [Path(p) for p in raw.split(":") if p]


STR: Kind[str] = Kind("text", lambda raw: raw)
PATH: Kind[Path] = Kind("a path", Path)
PATHS: Kind[list[Path]] = Kind("colon-separated folders", _path_list)
BOOL: Kind[bool] = Kind("1/0, true/false, yes/no or on/off", _bool)
URL: Kind[str] = Kind("an http(s) URL such as http://127.0.0.1:30100", _url)
PORT: Kind[int] = Kind("a TCP port 1-65535", lambda raw: _port(raw))
SECONDS = _seconds()


def _port(raw: str) -> int:
    value = int(raw.strip())
    if not 1 <= value <= 65535:
        raise ValueError
    return value


# ----- the registry ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting(Generic[T]):
    name: str
    kind: Kind[T]
    default: T | None
    doc: str
    group: str
    scope: tuple[str, ...]
    secret: bool = False
    example: str | None = None  # the value written into .env.example; None keeps it out
    fix: str = ""  # how to fix a bad value, when more than "unset it" helps

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        value = (os.environ if environ is None else environ).get(self.name, "")
        return value if value != "" else None

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return self.raw(environ) is not None

    def get(self, environ: Mapping[str, str] | None = None) -> T | None:
        """The typed value, the default when unset; SettingError (exit 2) for a value that does not parse."""
        raw = self.raw(environ)
        if raw is None:
            return self.default
        try:
            return self.kind.parse(raw)
        except (ValueError, TypeError):
            raise SettingError(self.problem(raw)) from None

    def problem(self, raw: str) -> str:
        shown = "<hidden>" if self.secret else repr(raw)
        default = "" if self.default is None else f" (default {self.shown_default})"
        fix = self.fix or f"set it to {self.kind.expected}, or unset it{default}"
        return f"environment variable {self.name}={shown} is not {self.kind.expected}; {fix}"

    @property
    def shown_default(self) -> str:
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        if isinstance(self.default, list):
            return ":".join(str(p) for p in self.default)
        return str(self.default)


REGISTRY: dict[str, Setting[Any]] = {}


def _reg(name: str, kind: Kind[T], default: T | None, doc: str, group: str, scope: str, **kw: Any) -> Setting[T]:
    if name in REGISTRY:
        raise RuntimeError(f"setting {name} registered twice")
    s = Setting(name, kind, default, doc, group, tuple(scope.split()), **kw)
    REGISTRY[name] = s
    return s


# Models
MODEL_PATH = _reg("MODEL_PATH", STR, None, "Absolute path of the target model directory (required; mounted read-only at the same path).", "models", "profile compose", example="")
DRAFT_MODEL_PATH = _reg("DRAFT_MODEL_PATH", STR, None, "Absolute path of the EAGLE-3 draft model directory; required for SPEC=eagle3, unused by ngram and off.", "models", "profile compose", example="")
HF_TOKEN = _reg("HF_TOKEN", STR, None, "Hugging Face token, only if the server has to download gated files.", "models", "compose", secret=True, example="")
HF_CACHE_DIR = _reg("HF_CACHE_DIR", STR, None, "Host directory for the Hugging Face cache; unset uses the named volume hf-cache.", "models", "compose", example="")

# What runs
PROFILE = _reg("PROFILE", STR, "baseline", "Profile the server starts with (profiles/<name>.toml; `make profiles` lists them).", "what runs", "server compose", example="baseline")
SPEC = _reg("SPEC", STR, "eagle3", "Speculation mode: eagle3, ngram or off (profiles/spec/<mode>.toml).", "what runs", "server client compose", example="eagle3")
PROFILES_DIR = _reg("KIT_PROFILES_DIR", PATHS, [], "Extra profile folders, colon-separated; their profiles shadow built-ins of the same name.", "what runs", "server client", example="")
BUILTIN_PROFILES_DIR = _reg("KIT_BUILTIN_PROFILES_DIR", PATH, None, "Folder of the built-in profiles; unset: the ones shipped in the package (or profiles/ of a checkout).", "what runs", "server client")
HOST_FACTS = _reg("KIT_HOST_FACTS", PATH, None, "JSON from `launcher doctor --json`; when set, serve and switches apply the host-dependent rules to it.", "what runs", "server")

# Knobs the built-in profiles read as ${NAME:-default}
TP_SIZE = _reg("KIT_TP_SIZE", _int(1), 8, "Tensor-parallel size; also the EP size of the ep profiles.", "profile knobs", "profile compose", example="")
NCCL_P2P_LEVEL = _reg("KIT_NCCL_P2P_LEVEL", _choice("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"), "SYS", "NCCL_P2P_LEVEL of nccl-tuned and the profiles built on it; lower it (PXB, PHB) if `make doctor` reports P2P problems across PCIe roots.", "profile knobs", "profile compose", example="")
SERVER_HOST = _reg("KIT_SERVER_HOST", STR, "0.0.0.0", "Address SGLang listens on inside the container; set it only to run `launcher` directly on a host.", "profile knobs", "profile", example="")
SERVER_PORT = _reg("KIT_SERVER_PORT", PORT, 30000, "Port SGLang listens on inside the container; set it only to run `launcher` directly on a host.", "profile knobs", "profile", example="")

# Control API
CONTROL_TOKEN = _reg("KIT_CONTROL_TOKEN", STR, None, "Shared secret for state-changing control calls (make switch, make bench); without it the control API refuses them. Generate one: openssl rand -hex 32.", "control API", "server client compose", secret=True, example="")
CONTROL_HOST = _reg("KIT_CONTROL_HOST", STR, "127.0.0.1", "Address the control API listens on (the server image sets 0.0.0.0; compose publishes it on KIT_BIND_ADDR).", "control API", "server client")
CONTROL_PORT = _reg("KIT_CONTROL_PORT", PORT, 30100, "Port the control API listens on.", "control API", "server client")
CONTROL_URL = _reg("KIT_CONTROL_URL", URL, None, "Control API URL for clients (launcher switch/status, bench); unset: http://KIT_CONTROL_HOST:KIT_CONTROL_PORT.", "control API", "client")

# Server runtime
STATE_DIR = _reg("KIT_STATE_DIR", PATH, Path("/var/lib/kit"), "Rendered plan, committed plan, switch history, supervisord config and logs.", "server runtime", "server client")
SERVER_CMD = _reg("KIT_SERVER_CMD", STR, None, "Replaces `python -m sglang.launch_server` (a custom build, or the test stand-in).", "server runtime", "server client")
PATCH_CHECK = _reg("KIT_PATCH_CHECK", _choice("enforce", "skip"), "enforce", "enforce: refuse a profile whose SGLang patches the installed sglang lacks; skip: do not look (a KIT_SERVER_CMD without sglang). /status shows it.", "server runtime", "server")
SITECUSTOMIZE_DIR = _reg("KIT_SITECUSTOMIZE_DIR", PATH, None, "Folder holding the kit's sitecustomize.py; unset: the one shipped in the package (or sitecustomize/ of a checkout).", "server runtime", "server")
PROFILE_ENV = _reg("KIT_PROFILE_ENV", PATH, None, "The env file sitecustomize applies; supervisord.conf sets it on the server program only. A name ending in .json reads a plan JSON (one process by hand).", "server runtime", "server")
ACTIVE_PROFILE = _reg("KIT_ACTIVE_PROFILE", STR, None, "Set by sitecustomize in every process it configured: the applied profile's name. Never set it yourself.", "server runtime", "server")
ACTIVE_SPEC = _reg("KIT_ACTIVE_SPEC", STR, None, "Set by sitecustomize beside KIT_ACTIVE_PROFILE: the applied spec mode.", "server runtime", "server")
STOP_WAIT_S = _reg("KIT_STOP_WAIT_S", _int(1), 120, "Seconds supervisord waits after SIGTERM before it kills the server's process group.", "server runtime", "server")
START_SECS = _reg("KIT_START_SECS", _int(0), 5, "Seconds the server must stay up for supervisord to count a start as successful.", "server runtime", "server")
START_RETRIES = _reg("KIT_START_RETRIES", _int(0), 3, "Restarts supervisord tries after a failed start before it marks the server FATAL.", "server runtime", "server")
DRAIN_TIMEOUT_S = _reg("KIT_DRAIN_TIMEOUT_S", SECONDS, 300.0, "Longest a switch waits for running requests to finish; then the switch is aborted and nothing changes.", "server runtime", "server")
HEALTH_TIMEOUT_S = _reg("KIT_HEALTH_TIMEOUT_S", SECONDS, 1800.0, "Health-gate timeout of a switch's new profile, when the request names none.", "server runtime", "server")
ROLLBACK_TIMEOUT_S = _reg("KIT_ROLLBACK_TIMEOUT_S", SECONDS, 1800.0, "Health-gate timeout when a failed switch brings the previous profile back.", "server runtime", "server")
ACTIVATION_FAILURE = _reg("KIT_ACTIVATION_FAILURE", _choice("rollback", "degraded"), "rollback", "When a switch's new server is healthy but a backend its profile expects ([expects]) is not running: roll back, or keep it with outcome 'degraded'.", "server runtime", "server")
RETRY_BACKOFF_S = _reg("KIT_RETRY_BACKOFF_S", SECONDS, 5.0, "After supervisord gives up on a crash-looping server (FATAL), the control API starts it again after this wait, doubling each time.", "server runtime", "server")
RETRY_BACKOFF_MAX_S = _reg("KIT_RETRY_BACKOFF_MAX_S", SECONDS, 300.0, "The longest wait between those automatic restarts.", "server runtime", "server")

# Bench and diagnostics
SERVER_URL = _reg("KIT_SERVER_URL", URL, "http://127.0.0.1:30000", "SGLang URL the bench measures (the bench container sets http://server:30000).", "bench and diagnostics", "client")
NCCL_VERSION = _reg("KIT_NCCL_VERSION", STR, None, "NCCL version recorded in bench bundles when the bench cannot see the server's (its own container).", "bench and diagnostics", "client")
GIT_SHA = _reg("KIT_GIT_SHA", STR, None, "Kit revision recorded in bench bundles when git cannot tell (an image).", "bench and diagnostics", "client")
IMAGE_ID = _reg("KIT_IMAGE_ID", STR, None, "Image id recorded in bench bundles.", "bench and diagnostics", "client")
NCCL_TESTS_BIN = _reg("KIT_NCCL_TESTS_BIN", PATH, None, "nccl-tests' all_reduce_perf for `bench allreduce --with-nccl-tests` (the server image sets it; elsewhere all_reduce_perf on PATH).", "bench and diagnostics", "client")
DOCTOR_ROOT = _reg("KIT_DOCTOR_ROOT", PATH, Path("/"), "Prefix of every /proc, /sys and /dev path the doctor reads (a saved copy of another host).", "bench and diagnostics", "client")
ALLREDUCE_TEST_HANG_RANK = _reg("KIT_ALLREDUCE_TEST_HANG_RANK", _int(0), None, "Test hook: this rank of `bench allreduce` stalls on purpose, to prove the hang detector names it.", "bench and diagnostics", "test")

# Compose, Makefile and image builds only
BIND_ADDR = _reg("KIT_BIND_ADDR", STR, "127.0.0.1", "Host address the ports are published on; 0.0.0.0 exposes SGLang and the control API to the network: set KIT_CONTROL_TOKEN first.", "ports and results", "compose", example="127.0.0.1")
SGLANG_HOST_PORT = _reg("SGLANG_HOST_PORT", PORT, 30000, "Host port of SGLang's HTTP API (container port 30000).", "ports and results", "compose", example="30000")
CONTROL_HOST_PORT = _reg("CONTROL_HOST_PORT", PORT, 30100, "Host port of the control API (container port 30100).", "ports and results", "compose", example="30100")
RESULTS_DIR = _reg("RESULTS_DIR", STR, "./results", "Host folder that bench and `make allreduce` write to (mounted at /results).", "ports and results", "compose", example="")
UID = _reg("KIT_UID", _int(0), 0, "User the bench container writes results as (`make bench` sets yours).", "ports and results", "compose", example="")
GID = _reg("KIT_GID", _int(0), 0, "Group the bench container writes results as (`make bench` sets yours).", "ports and results", "compose", example="")
SERVER_IMAGE = _reg("KIT_SERVER_IMAGE", STR, "pcie-spec-kit/server:local", "Name of the server image compose builds and runs.", "images", "compose", example="pcie-spec-kit/server:local")
BENCH_IMAGE = _reg("KIT_BENCH_IMAGE", STR, "pcie-spec-kit/bench:local", "Name of the bench image compose builds and runs.", "images", "compose", example="pcie-spec-kit/bench:local")
SGLANG_IMAGE = _reg("SGLANG_IMAGE", STR, None, "Server base image; unset: the Dockerfile's default. Pin by digest to reproduce a host exactly.", "images", "build", example="")
BENCH_BASE_IMAGE = _reg("BENCH_BASE_IMAGE", STR, None, "Bench base image; unset: the Dockerfile's default.", "images", "build", example="")
MSCCLPP_REF = _reg("MSCCLPP_REF", STR, None, "MSCCL++ release tag the server image builds (Dockerfile default v0.10.0).", "images", "build", example="")
DEEPEP_REF = _reg("DEEPEP_REF", STR, None, "DeepEP commit, built for SM120 only when the shipped sgl-deep-ep has no sm_120 code.", "images", "build", example="")
DEEPEP_SM120 = _reg("DEEPEP_SM120", _choice("ensure", "skip"), "ensure", "ensure: the build fails if DeepEP ends up without sm_120 code; skip: do not check.", "images", "build", example="")
NCCL_WHEEL = _reg("NCCL_WHEEL", STR, None, "NCCL the server image installs over the base's (Dockerfile default nvidia-nccl-cu13>=2.31.2,<3, nccl#2418); base: keep the base image's.", "images", "build", example="")

GROUP_ORDER = ("models", "what runs", "profile knobs", "control API", "server runtime", "bench and diagnostics",
               "ports and results", "images")


def secret_names() -> frozenset[str]:
    return frozenset(n for n, s in REGISTRY.items() if s.secret)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets set in this process (at least 4 characters: shorter ones would blank common text)."""
    env = os.environ if environ is None else environ
    return [env[n] for n in sorted(secret_names()) if len(env.get(n) or "") >= 4]


# ----- what a profile may set and reference --------------------------------------------------------
# A profile's [env] reaches the server's processes, and its ${VAR} references reach argv, state files
# and logs. The kit's own names are off limits to both, so a profile can never change the control
# token, the state directory or the way sitecustomize finds the plan.
NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,63}"  # profile and spec names: also their file names
RESERVED_ENV_PREFIX = "KIT_"  # the kit's namespace, registered or not
PROCESS_ENV_NAMES = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"})  # would unhook sitecustomize
SWITCH_TIMEOUT_MAX_S = 3600.0  # the largest timeout_s a switch accepts


def reserved_env_reason(name: str) -> str | None:
    """Why a profile's [env] may not set `name`, or None when it may."""
    if name in REGISTRY:
        return f"{name} is one of the kit's own settings (docs/settings.md)"
    if name.startswith(RESERVED_ENV_PREFIX):
        return f"the {RESERVED_ENV_PREFIX} prefix is reserved for the kit"
    if name in PROCESS_ENV_NAMES:
        return f"{name} decides which code the server runs and is set by the kit"
    return None


def reference_refused(name: str) -> str | None:
    """Why a profile's ${name} may not be expanded, or None when it may (profile-scoped settings and
    variables outside the registry)."""
    s = REGISTRY.get(name)
    if s is None:
        return None
    if s.secret:
        return f"{name} is a secret"
    if "profile" not in s.scope:
        return f"{name} is a kit setting that profiles may not read (scope: {', '.join(s.scope)})"
    return None


def check(scopes: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
    """Parse every setting read in `scopes`; one SettingError listing all bad values."""
    wanted = set(scopes)
    problems = []
    for s in REGISTRY.values():
        if wanted & set(s.scope):
            try:
                s.get(environ)
            except SettingError as exc:
                problems.append(str(exc))
    if problems:
        raise SettingError("; ".join(problems))


def control_url(environ: Mapping[str, str] | None = None) -> str:
    """KIT_CONTROL_URL, else the control API's own host and port (a wildcard address is reached on loopback)."""
    explicit = CONTROL_URL.get(environ)
    if explicit:
        return explicit
    host = CONTROL_HOST.get(environ) or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{CONTROL_PORT.get(environ)}"


# ----- state files and log paths -------------------------------------------------------------------
PROFILE_JSON = "profile.json"  # the rendered plan: argv for server_exec, /plan for clients
PROFILE_ENV_FILE = "profile.env"  # NUL-separated NAME=value: what KIT_PROFILE_ENV names for the server
CMDLINE_FILE = "cmdline"
COMMITTED_FILE = "committed.json"
BOOT_FILE = "boot.json"
HISTORY_FILE = "history.jsonl"
JOURNAL_FILE = "switch.json"  # the switch in progress; present only while one runs or was cut short
PATCH_RECORD_FILE = "kit_patches.json"  # in the installed sglang package, written by patches/apply.py


# Role -> path under KIT_STATE_DIR.
STATE_LAYOUT = {
    "profile_json": PROFILE_JSON,
    "profile_env": PROFILE_ENV_FILE,
    "cmdline": CMDLINE_FILE,
    "committed": COMMITTED_FILE,
    "boot": BOOT_FILE,
    "history": HISTORY_FILE,
    "journal": JOURNAL_FILE,
    "supervisord_conf": "supervisord.conf",
    "supervisord_pid": "supervisord.pid",
    "socket": "supervisor.sock",
    "logs": "logs",
    "server_log": "logs/sglang.log",
    "supervisord_log": "logs/supervisord.log",
}


class StatePaths:
    """Every file under KIT_STATE_DIR, by role (the keys of STATE_LAYOUT)."""

    profile_json: Path
    profile_env: Path
    cmdline: Path
    committed: Path
    boot: Path
    history: Path
    journal: Path
    supervisord_conf: Path
    supervisord_pid: Path
    socket: Path
    logs: Path
    server_log: Path
    supervisord_log: Path

    def __init__(self, root: Path):
        self.root = Path(root)
        for role, rel in STATE_LAYOUT.items():
            setattr(self, role, self.root / rel)


def state_paths(arg: str | os.PathLike[str] | None = None) -> StatePaths:
    """`--state-dir` when given, else KIT_STATE_DIR, else /var/lib/kit."""
    return StatePaths(Path(arg) if arg else STATE_DIR.get())
