"""Stand-in server settings: the simulated timing, accept length and faults, with a known truth.

Precedence, lowest first:
1. the field defaults below (a fast demo that reproduces the PCIe problem: spec slower than none);
2. the "default" section of the JSON file named by ``STANDIN_CONFIG``;
3. the ``profiles.<KIT_ACTIVE_PROFILE>`` section of that file, when both exist;
4. environment variables ``STANDIN_<FIELD>`` (for example ``STANDIN_TTFT_MS=25``).

File shape::

    {"default": {"ttft_ms": 40, "verify_ms": 30},
     "profiles": {"custom-ar": {"verify_ms": 14}, "broken": {"corrupt_output": true}}}

Unknown keys and unknown ``STANDIN_*`` variables are errors, so a typo never passes silently.

Faults:
- ``crash_at_start``: print the banner and an error, exit 1 before listening.
- ``hang_at_start``: listen, but /health and /health_generate answer 503 forever.
- ``die_mid_stream``: generation requests (/generate and /v1/chat/completions, streaming or not)
  are numbered from 1; request ``die_on_request`` gets ``die_after_chunks`` chunks, then the process
  exits at once with status 1 (``os._exit``: no [DONE], no clean-up). A request with fewer chunks
  than that completes and the server lives on.
- ``mscclpp_init_failure``: print SGLang 0.5.23's lines for a failed MSCCL++ start (its cause line, the
  traceback, the scheduler's and the launcher's lines) and die before listening, as SGLang does
  (testsupport/standin/activation.py).

Numerics (numerics.py): ``numerics`` says what the profile's all-reduce does to the log-probabilities,
``numerics_model`` whether a decode also depends on the batch it runs in (``moe``: batch variance and routing
flips, SIMULATED), and ``corrupt_min_batch`` makes the numerics ``corrupt`` only where a pass ran with at least
that many requests in flight (a fault that shows only under concurrency). /server_info's "standin" also counts
the generated positions by the requests in flight when their pass ran (``positions_by_batch``).

/metrics under load (the switch's drain reads it): ``metrics_busy_delay_s`` makes it wait that long,
and ``metrics_busy_status`` answer that status instead, while a generation request runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.errors import UserError
from testsupport.standin.numerics import Numerics, NumericsModel

CONFIG_ENV = "STANDIN_CONFIG"
PROFILE_ENV = "KIT_ACTIVE_PROFILE"
ENV_PREFIX = "STANDIN_"

Fault = Literal["none", "crash_at_start", "hang_at_start", "die_mid_stream", "mscclpp_init_failure"]


class StandinSettings(BaseModel):
    """What the simulated server does; every field is also exposed in /server_info under "standin"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    load_delay_s: float = Field(
        0.0, ge=0, description="Seconds before the server listens at all (SGLang loading the model: connections are "
        "refused), before the startup_delay_s warm-up in which /health answers 503.")
    startup_delay_s: float = Field(1.0, ge=0, description="/health answers 503 for this long after it listens.")
    health_delay_s: float = Field(
        0.0, ge=0, description="/health and /health_generate answer after this long (SGLang 0.5.23 runs a one-token "
        "generation and polls for it once a second: at least 1 s).")
    ttft_ms: float = Field(40.0, ge=0, description="Request arrival to the first chunk.")
    decode_ms: float = Field(12.0, ge=0, description="Chunk interval without speculation (1 token a chunk).")
    verify_ms: float = Field(30.0, ge=0, description="Chunk interval with speculation (one verify pass).")
    accept_length: float = Field(2.0, ge=1.0, description="Tokens per verify pass under speculation.")
    default_max_tokens: int = Field(128, ge=0, description="max_new_tokens when a request names none.")
    batch_cost: float = Field(
        0.0, ge=0, description="Batching model (simulation.py `batch_factor`): each further running request slows "
        "a forward pass by this share per token it carries (1 decoding, the draft tokens when verifying), so "
        "speculation pays less as the batch grows; 0 (the default): requests do not slow each other down.")
    max_running_requests: int | None = Field(
        None, ge=1, description="The most requests running at once, as the plan's --max-running-requests sets it "
        "(engine.py: the flag wins when the plan gives one); the rest wait in the queue, their wait timed as TTFT, "
        "and /server_info reports it as SGLang does. A small cap gives an open-loop load a rate it cannot hold: "
        "above cap / service time requests queue and p99 TTFT climbs (what `bench sla` searches for); null (the "
        "default): the plan's, else SGLang's own (48 under EAGLE/NGRAM, 2048 otherwise).")
    fault: Fault = "none"
    die_on_request: int = Field(1, ge=1, description="die_mid_stream: which generation request (1-based).")
    die_after_chunks: int = Field(3, ge=0, description="die_mid_stream: chunks sent before the exit.")
    crash_while: str = Field("", description="Crash at start, after load_delay_s, while this file exists (a crash loop the test ends).")
    ignore_sigterm: bool = Field(
        False, description="The server, and the process spawn_orphan starts, ignore SIGTERM: only SIGKILL ends them."
    )
    spawn_orphan: str = Field(
        "", description="Start a process in its own session (it leaves the process group) and write its pid here."
    )
    withhold_activation: str = Field(
        "", description="Comma-separated backends (fusion, pcie-ipc, mscclpp) whose start-up line is replaced "
        "by SGLang's fallback warning: healthy, but running NCCL."
    )
    activation_missing_ranks: str = Field(
        "", description="Comma-separated TP ranks that log no line for the backends switched on: up on some ranks only."
    )
    adaptive_disabled: str = Field(
        "", description="Started with --speculative-adaptive: log SGLang's 'speculative_adaptive disabled: <this>. "
        "Falling back to static speculative params.' instead of its 'AdaptiveSpeculativeParams initialized' line "
        "(testsupport/standin/activation.py)."
    )
    adaptive_steps: str = Field(
        "", description="Started with adaptive EAGLE on: comma-separated steps it moves to, one per finished "
        "generation request, each logged as SGLang's 'Adaptive spec params updated: steps X -> Y' line."
    )
    log_filler_mb: float = Field(
        0.0, ge=0, description="MB of SGLang-like decode log lines written after the start-up lines, before ready."
    )
    running_gauge_after_tokens: int = Field(
        0, ge=0, description="/metrics' num_running_reqs counts a request only once it has this many output tokens. "
        "SGLang 0.5.23 refreshes the gauge at a prefill (counting the batch already running, not the new request) and "
        "every decode_log_interval (40) decode steps, so a request's first 40 tokens can read 0 "
        "(sglang/srt/managers/scheduler_components/metrics_reporter.py:853-860, 933-934); 0: counted at once."
    )
    metrics_busy_delay_s: float = Field(
        0.0, ge=0, description="/metrics waits this long before answering while a generation request runs "
        "(a server too loaded to answer its scrape in time)."
    )
    metrics_busy_status: int = Field(
        200, ge=200, le=599, description="/metrics answers this status, without metrics, while a generation request runs."
    )
    corrupt_output: bool = Field(
        False, description="Different text and accept length 1.0 (wrong all-reduce)."
    )
    numerics: Numerics = Field(
        "reference", description="What the profile's all-reduce does to the log-probabilities (numerics.py): "
        "reference (none), reorder (a correct sum in another order: rounding noise, flips at near-ties), "
        "corrupt (a broken one: large jumps)."
    )
    numerics_model: NumericsModel = Field(
        "dense", description="How a decode depends on its batch (numerics.py): dense (it does not: the reference is "
        "the same at every concurrency) or moe (a mixture-of-experts model: requests sharing a forward pass change "
        "the rounding and now and then a token's experts, so the reference at batch 8 differs from batch 1's, and "
        "reorder and corrupt add their own change of that kind). SIMULATED, invented figures."
    )
    corrupt_min_batch: int | None = Field(
        None, ge=1, description="A fault that shows only when requests share a forward: the numerics are corrupt "
        "at the positions decoded in a batch of at least this many requests (requests in flight when the pass "
        "runs, padded up to a power of two as a CUDA graph runs them: 5 to 8 in flight count as 8), the "
        "profile's own numerics elsewhere; null (the default): never."
    )
    logprobs: bool = Field(
        True, description="Answer requests for log-probabilities; false ignores them (an older or another "
        "server): replies carry none."
    )
    trace_comm_fraction: float = Field(
        0.7, ge=0, le=1, description="Share of each traced forward pass spent in all-reduce kernels."
    )
    trace_allreduces_per_pass: int = Field(8, ge=1, description="All-reduce kernels per traced pass.")
    trace_min_passes: int = Field(
        3, ge=1, description="Passes in a trace when no request ran while profiling."
    )


FIELDS = tuple(StandinSettings.model_fields)


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read stand-in config ({exc.strerror}); fix {CONFIG_ENV}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}; fix the file"
        ) from exc
    if not isinstance(data, dict):
        raise UserError(f'{path}: top level must be an object with "default" and/or "profiles"')
    unknown = sorted(set(data) - {"default", "profiles"})
    if unknown:
        raise UserError(f'{path}: unknown top-level key(s) {unknown}; allowed: "default", "profiles"')
    return data


def _section(data: Mapping[str, Any], path: Path, profile: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The sections that apply, lowest precedence first, each with a name for error messages."""
    sections: list[tuple[str, dict[str, Any]]] = []
    default = data.get("default", {})
    if not isinstance(default, dict):
        raise UserError(f'{path}: "default" must be an object of stand-in settings')
    sections.append(("default", default))
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise UserError(f'{path}: "profiles" must be an object mapping profile names to settings')
    if profile and profile in profiles:
        chosen = profiles[profile]
        if not isinstance(chosen, dict):
            raise UserError(f'{path}: "profiles.{profile}" must be an object of stand-in settings')
        sections.append((f"profiles.{profile}", chosen))
    return sections


def _env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        field = name[len(ENV_PREFIX) :].lower()
        if field not in FIELDS:
            allowed = ", ".join(ENV_PREFIX + f.upper() for f in FIELDS)
            raise UserError(f"environment variable {name} is not a stand-in setting; use one of {allowed}")
        overrides[field] = value
    return overrides


def _validation_message(exc: ValidationError, origin: Mapping[str, str]) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        where = origin.get(field, "settings")
        if err["type"] == "extra_forbidden":
            parts.append(f"{where}: {field}: unknown setting; known settings: {', '.join(FIELDS)}")
        else:
            parts.append(f"{where}: {field}: {err['msg']}")
    return "invalid stand-in settings: " + "; ".join(parts)


def load_settings(environ: Mapping[str, str] | None = None) -> StandinSettings:
    """Resolve the settings from the config file, the active profile's section and env overrides."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    config = env.get(CONFIG_ENV)
    if config:
        path = Path(config)
        data = _read_config_file(path)
        for name, section in _section(data, path, env.get(PROFILE_ENV)):
            for key, value in section.items():
                merged[key] = value
                origin[key] = f"{path} [{name}]"
    for key, value in _env_overrides(env).items():
        merged[key] = value
        origin[key] = f"environment {ENV_PREFIX}{key.upper()}"
    try:
        return StandinSettings(**merged)
    except ValidationError as exc:
        raise UserError(_validation_message(exc, origin)) from exc
