"""Every environment setting the kit reads, in one typed registry (the shape of SGLang's `environ.py`).

Each setting is declared once, as an attribute of a `Section` whose name is the variable's name, with a
type, a default, one line of documentation and a secret mark. Code reads a value only through its
`Setting` (`settings.KIT_STATE_DIR.get()`), so a bad value is handled one way everywhere: `SettingError`
(a `UserError`, exit 2) naming the variable, the value and what is expected. Server-side processes call
`check()` before they start anything and refuse to start. An empty value means unset, as docker
compose passes `${X:-}`.

`.env.example` and `docs/settings.md` are generated from this module
(`python -m launcher settings --write`); a test fails when they drift. The state-file layout lives in
`launcher/state_layout.py`, what a profile may set in `launcher/profiles/policy.py`.
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


def _positive(unit: str) -> Kind[float]:
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not math.isfinite(value) or value <= 0:
            raise ValueError
        return value

    return Kind(f"a finite number of {unit} > 0", parse)


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
REGISTRY: dict[str, Setting[Any]] = {}


class Setting(Generic[T]):
    """One environment variable. Its name is the attribute it is bound to in a `Section` (written once)."""

    name: str
    group: str

    def __init__(self, kind: Kind[T], default: T | None, doc: str, scope: str, *, secret: bool = False,
                 example: str | None = None, fix: str = ""):
        self.kind, self.default, self.doc = kind, default, doc
        self.scope: tuple[str, ...] = tuple(scope.split())
        self.secret = secret
        self.example = example  # the value written into .env.example; None keeps it out
        self.fix = fix  # how to fix a bad value, when more than "unset it" helps
        unknown = set(self.scope) - set(SCOPES)
        if unknown:
            raise RuntimeError(f"unknown setting scope {sorted(unknown)}")

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Setting({self.name})"

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


class Section:
    """A group of settings as docs/settings.md and .env.example show them; the class order is theirs."""

    title: str = ""

    def __init_subclass__(cls, title: str, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.title = title
        GROUP_ORDER.append(title)
        for setting in vars(cls).values():
            if isinstance(setting, Setting):
                if setting.name in REGISTRY:
                    raise RuntimeError(f"setting {setting.name} registered twice")
                setting.group = title
                REGISTRY[setting.name] = setting


GROUP_ORDER: list[str] = []


class Models(Section, title='models'):
    MODEL_PATH = Setting(STR, None, "Absolute path of the target model directory (required; mounted read-only at the same path).", "profile compose", example="")
    DRAFT_MODEL_PATH = Setting(STR, None, "Absolute path of the EAGLE-3 draft model directory; required for SPEC=eagle3, unused by ngram and off.", "profile compose", example="")
    HF_TOKEN = Setting(STR, None, "Hugging Face token, only if the server has to download gated files.", "compose", secret=True, example="")
    HF_CACHE_DIR = Setting(STR, None, "Host directory for the Hugging Face cache; unset uses the named volume hf-cache.", "compose", example="")


class WhatRuns(Section, title='what runs'):
    PROFILE = Setting(STR, "baseline", "Profile the server starts with (profiles/<name>.toml; `make profiles` lists them).", "server compose", example="baseline")
    SPEC = Setting(STR, "eagle3", "Speculation mode: eagle3, eagle3-adaptive, ngram or off (profiles/spec/<mode>.toml).", "server client compose", example="eagle3")
    MODEL_OVERLAY = Setting(STR, None, "Model overlay laid over every profile and spec mode (profiles/model/<name>.toml, e.g. kimi-k2: the model's tool-call and reasoning parsers); empty: none. One choice per deployment: a switch keeps the server's.", "server client compose", example="")
    KIT_PROFILES_DIR = Setting(PATHS, [], "Extra profile folders, colon-separated; their profiles shadow built-ins of the same name.", "server client", example="")
    KIT_BUILTIN_PROFILES_DIR = Setting(PATH, None, "Folder of the built-in profiles; unset: the ones shipped in the package (or profiles/ of a checkout).", "server client")
    KIT_CACHE_DIR = Setting(PATH, None, "Where SGLang's verdicts on command lines are kept (building its parser takes seconds); unset: $XDG_CACHE_HOME/sglang-kit, else ~/.cache/sglang-kit. Safe to delete.", "server client")
    KIT_HOST_FACTS = Setting(PATH, None, "JSON from `launcher doctor --json`; when set, serve and switches apply the host-dependent rules to it.", "server")


class ProfileKnobs(Section, title='profile knobs'):
    KIT_TP_SIZE = Setting(_int(1), 8, "Tensor-parallel size; also the EP size of the ep profiles.", "profile compose", example="")
    KIT_NCCL_P2P_LEVEL = Setting(_choice("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"), "SYS", "NCCL_P2P_LEVEL of nccl-tuned and the profiles built on it; lower it (PXB, PHB) if `make doctor` reports P2P problems across PCIe roots.", "profile compose", example="")
    KIT_SERVER_HOST = Setting(STR, "0.0.0.0", "Address SGLang listens on inside the container; set it only to run `launcher` directly on a host.", "profile", example="")
    KIT_SERVER_PORT = Setting(PORT, 30000, "Port SGLang listens on inside the container; set it only to run `launcher` directly on a host.", "profile", example="")


class ControlAPI(Section, title='control API'):
    KIT_CONTROL_TOKEN = Setting(STR, None, "Shared secret for state-changing control calls (make switch, make bench); without it the control API refuses them. Generate one: openssl rand -hex 32.", "server client compose", secret=True, example="")
    KIT_CONTROL_HOST = Setting(STR, "127.0.0.1", "Address the control API listens on (the server image sets 0.0.0.0; compose publishes it on KIT_BIND_ADDR).", "server client")
    KIT_CONTROL_PORT = Setting(PORT, 30100, "Port the control API listens on.", "server client")
    KIT_CONTROL_URL = Setting(URL, None, "Control API URL for clients (launcher switch/status, bench); unset: http://KIT_CONTROL_HOST:KIT_CONTROL_PORT.", "client")
    KIT_METRICS_AUTH = Setting(BOOL, False, "1: the control API's GET /metrics needs Authorization: Bearer $KIT_CONTROL_TOKEN, as a switch does; 0 (default): open, like /status and like Prometheus exporters, protected by the address it listens on (it shows no secret, env value or model path).", "server")


class ServerRuntime(Section, title='server runtime'):
    KIT_STATE_DIR = Setting(PATH, Path("/var/lib/kit"), "Rendered plan, committed plan, switch history, supervisord config and logs.", "server client")
    KIT_SERVER_CMD = Setting(STR, None, "Replaces `python -m sglang.launch_server` (a custom build, or the test stand-in).", "server client")
    KIT_PATCH_CHECK = Setting(_choice("enforce", "skip"), "enforce", "enforce: refuse a profile whose SGLang patches the installed sglang lacks; skip: do not look (a KIT_SERVER_CMD without sglang). /status shows it.", "server")
    KIT_SITECUSTOMIZE_DIR = Setting(PATH, None, "Folder holding the kit's sitecustomize.py; unset: the one shipped in the package (or sitecustomize/ of a checkout).", "server")
    KIT_PROFILE_ENV = Setting(PATH, None, "The env file sitecustomize applies; supervisord.conf sets it on the server program only. A name ending in .json reads a plan JSON (one process by hand).", "server")
    KIT_ACTIVE_PROFILE = Setting(STR, None, "Set by sitecustomize in every process it configured: the applied profile's name. Never set it yourself.", "server")
    KIT_ACTIVE_SPEC = Setting(STR, None, "Set by sitecustomize beside KIT_ACTIVE_PROFILE: the applied spec mode.", "server")
    KIT_STOP_WAIT_S = Setting(_int(5), 120, "Seconds supervisord waits after SIGTERM before it kills the server's process group; at least 5, so the server's leftovers are ended before that (launcher/runtime/process/server_exec.py).", "server")
    KIT_START_SECS = Setting(_int(0), 5, "Seconds the server must stay up for supervisord to count a start as successful.", "server")
    KIT_START_RETRIES = Setting(_int(0), 3, "Restarts supervisord tries after a failed start before it marks the server FATAL.", "server")
    KIT_DRAIN_TIMEOUT_S = Setting(SECONDS, 300.0, "Longest a switch waits for running requests to finish; then the switch is aborted and nothing changes.", "server")
    KIT_HEALTH_TIMEOUT_S = Setting(SECONDS, 1800.0, "Health-gate timeout of a switch's new profile, when the request names none.", "server")
    KIT_HEALTH_PROBE_TIMEOUT_S = Setting(SECONDS, 25.0, "Timeout of each /health probe the control API's monitor sends. SGLang 0.5.23's /health runs a one-token generation and polls for it once a second (at least 1 s, up to its own 20 s health-check limit, then 503), so the default waits past that: a slow answer is an answer, never a 'timeout'.", "server")
    KIT_HEALTH_PROBE_PERIOD_S = Setting(SECONDS, 0.25, "Pause between the monitor's /health probes (each one a generation on SGLang, at least 1 s long: about one probe every 1.25 s).", "server")
    KIT_ROLLBACK_TIMEOUT_S = Setting(SECONDS, 1800.0, "Health-gate timeout when a failed switch brings the previous profile back.", "server")
    KIT_ALLREDUCE_START_CHECK = Setting(BOOL, True, "Before SGLang starts under a profile that changes its all-reduce (fused, custom-ar, mscclpp, symm-mem, tuned NCCL), check that backend exactly on the server's GPUs (`bench allreduce --exact-only`, seconds); a wrong sum stops the start (exit 1). 0: skip the check.", "server")
    KIT_ACTIVATION_FAILURE = Setting(_choice("rollback", "degraded"), "rollback", "When a switch's new server is healthy but a backend its profile expects ([expects]) is not running: roll back, or keep it with outcome 'degraded'.", "server")
    KIT_RETRY_BACKOFF_S = Setting(SECONDS, 5.0, "After supervisord gives up on a crash-looping server (FATAL), the control API starts it again after this wait, doubling each time.", "server")
    KIT_RETRY_BACKOFF_MAX_S = Setting(SECONDS, 300.0, "The longest wait between those automatic restarts.", "server")


class BenchAndDiagnostics(Section, title='bench and diagnostics'):
    KIT_SERVER_URL = Setting(URL, "http://127.0.0.1:30000", "SGLang URL the bench measures (the bench container sets http://server:30000).", "client")
    KIT_NCCL_VERSION = Setting(STR, None, "NCCL version recorded in bench bundles when the bench cannot see the server's (its own container).", "client")
    KIT_GIT_SHA = Setting(STR, None, "Kit revision recorded in bench bundles when git cannot tell (an image).", "client")
    KIT_IMAGE_ID = Setting(STR, None, "Image id recorded in bench bundles.", "client")
    KIT_NCCL_TESTS_BIN = Setting(PATH, None, "nccl-tests' all_reduce_perf for `bench allreduce --with-nccl-tests` (the server image sets it; elsewhere all_reduce_perf on PATH).", "client")
    KIT_AIC_PYTHON = Setting(PATH, None, "Python of the environment that has AIConfigurator (`make aic` creates .venv-aic) for `bench predict --aic`; unset: .venv-aic/bin/python in the current folder, else the kit's own Python. An optional extra, never a dependency.", "client")
    KIT_DOCTOR_ROOT = Setting(PATH, Path("/"), "Prefix of every /proc, /sys and /dev path the doctor reads (a saved copy of another host).", "client")
    # The correctness gate (bench/run/logprob_gate.py): docs/bench.md "The correctness gate" says how the null and
    # the calibrated limits come from docs/evidence/logprob-gate/ (dense and mixture-of-experts models on one H200).
    KIT_GATE_NULL_FACTOR = Setting(_positive("times"), 1.5, "Correctness gate: a profile FAILs when its mean or p99 log-probability change against baseline's (where both saw the same text) is above the calibrated floor plus this many times what baseline shows against itself at another batch size (the null the bench measures).", "client")
    KIT_GATE_MEAN_DELTA = Setting(_positive("nats"), None, "Correctness gate: a fixed limit on the mean log-probability change that replaces the one derived from the null (unset: derived).", "client")
    KIT_GATE_P99_DELTA = Setting(_positive("nats"), None, "Correctness gate: a fixed limit on the 99th percentile of the log-probability changes that replaces the derived one (unset: derived).", "client")
    KIT_GATE_MAX_FLIP_GAP = Setting(_positive("nats"), None, "Correctness gate: a fixed limit on the log-probability gap between the two tokens where the texts part that replaces the derived one (unset: derived).", "client")
    KIT_GATE_MAX_DELTA = Setting(_positive("nats"), None, "Correctness gate: when set, a profile also FAILs when one chosen token's log-probability moves by more than this (unset: reported, not judged; on a mixture-of-experts model a correct reordering moves single tokens by 0.5 nats when it swaps an expert).", "client")
    KIT_GATE_MIN_TOKENS = Setting(_int(1), 200, "Correctness gate: fewer tokens compared than this (over all prompts, before each first divergence) is 'not enough evidence', never a PASS.", "client")
    KIT_GATE_TOP_K = Setting(_int(1), 5, "Correctness gate: how many alternatives per token the correctness pass asks the server for (top_logprobs).", "client")
    KIT_ALLREDUCE_TEST_HANG_RANK = Setting(_int(0), None, "Test hook: this rank of `bench allreduce` stalls on purpose, to prove the hang detector names it.", "test")
    KIT_ALLREDUCE_TEST_CORRUPT_RANK = Setting(_int(0), None, "Test hook: this rank of `bench allreduce` overwrites one element of its result on the second call (and graph replay) of every size, to prove the exact check FAILs and names it.", "test")


class PortsAndResults(Section, title='ports and results'):
    KIT_BIND_ADDR = Setting(STR, "127.0.0.1", "Host address the ports are published on; 0.0.0.0 exposes SGLang and the control API to the network: set KIT_CONTROL_TOKEN first.", "compose", example="127.0.0.1")
    SGLANG_HOST_PORT = Setting(PORT, 30000, "Host port of SGLang's HTTP API (container port 30000).", "compose", example="30000")
    CONTROL_HOST_PORT = Setting(PORT, 30100, "Host port of the control API (container port 30100).", "compose", example="30100")
    RESULTS_DIR = Setting(STR, "./results", "Host folder that bench and `make allreduce` write to (mounted at /results).", "compose", example="")
    KIT_UID = Setting(_int(0), 0, "User the bench container writes results as (`make bench` sets yours).", "compose", example="")
    KIT_GID = Setting(_int(0), 0, "Group the bench container writes results as (`make bench` sets yours).", "compose", example="")


class Images(Section, title='images'):
    KIT_SERVER_IMAGE = Setting(STR, "pcie-spec-kit/server:local", "Name of the server image compose builds and runs.", "compose", example="pcie-spec-kit/server:local")
    KIT_BENCH_IMAGE = Setting(STR, "pcie-spec-kit/bench:local", "Name of the bench image compose builds and runs.", "compose", example="pcie-spec-kit/bench:local")
    SGLANG_IMAGE = Setting(STR, None, "Server base image; unset: the Dockerfile's default. Pin by digest to reproduce a host exactly.", "build", example="")
    BENCH_BASE_IMAGE = Setting(STR, None, "Bench base image; unset: the Dockerfile's default.", "build", example="")
    MSCCLPP_REF = Setting(STR, None, "MSCCL++ release tag the server image builds (Dockerfile default v0.10.0).", "build", example="")
    DEEPEP_REF = Setting(STR, None, "DeepEP commit, built for SM120 only when the shipped sgl-deep-ep has no sm_120 code.", "build", example="")
    DEEPEP_SM120 = Setting(_choice("ensure", "skip"), "ensure", "ensure: the build fails if DeepEP ends up without sm_120 code; skip: do not check.", "build", example="")
    NCCL_WHEEL = Setting(STR, None, "NCCL the server image installs over the base's (Dockerfile default nvidia-nccl-cu13==2.31.2, the release nccl#2418 shows passing on 2x RTX PRO 6000 over PCIe; another only when named here, as nvidia-nccl-cu13==X.Y.Z); base: keep the base image's.", "build", example="")



def secret_names() -> frozenset[str]:
    return frozenset(n for n, s in REGISTRY.items() if s.secret)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets set in this process (at least 4 characters: shorter ones would blank common text)."""
    env = os.environ if environ is None else environ
    return [env[n] for n in sorted(secret_names()) if len(env.get(n) or "") >= 4]


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
    explicit = ControlAPI.KIT_CONTROL_URL.get(environ)
    if explicit:
        return explicit
    host = ControlAPI.KIT_CONTROL_HOST.get(environ) or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{ControlAPI.KIT_CONTROL_PORT.get(environ)}"


def default_spec(environ: Mapping[str, str] | None = None) -> str:
    """The spec mode used wherever none is named: SPEC, else its registered default. /specs, a switch
    without a spec, serve, the Makefile (through the launcher) and the bench all ask here."""
    return WhatRuns.SPEC.get(environ) or str(WhatRuns.SPEC.default)


def __getattr__(name: str) -> Setting[Any]:
    """`settings.KIT_STATE_DIR`: every registered setting by its variable name, the one place it is written."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted([*globals(), *REGISTRY])
