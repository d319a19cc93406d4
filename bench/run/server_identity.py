"""Was the server the same one before and after a repeat? A restart mid-run invalidates its numbers.

SGLang 0.5.23's /server_info has no start time. What it does send that belongs to one server start:
- `startup_time`: the measured duration of each start-up phase (load_weight, kv_cache_allocation,
  scheduler_e2e, tokenizer_e2e, cuda_graph.*), floats at nanosecond resolution, built once per start
  (sglang/srt/observability/startup_time.py; http_server.py:886 adds it to /server_info); two starts
  practically never measure the same durations;
- `random_seed`: drawn afresh at each start when the launch command gives none
  (sglang/srt/arg_groups/serving_hook.py:660-665); pinned by `--random-seed`, then it says nothing.
The test stand-in sends a `start_time` (unix seconds) of its own; a real SGLang does not. /metrics
cannot help: SGLang serves it from prometheus_client's multiprocess collector only
(sglang/srt/utils/common.py:2843-2849), which exports no `process_start_time_seconds`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench import JsonObject

PROBE_ERRORS = (aiohttp.ClientError, TimeoutError, ValueError)  # a probe of a dead or restarting server

# identity key -> what the reason calls it
SIGNALS = {
    "start_time": "/server_info start_time",
    "startup_time": "/server_info startup_time (start-up phase durations)",
    "random_seed": "/server_info random_seed drawn at start",
}


def seed_is_pinned(info: JsonObject) -> bool:
    """Whether the server was told its seed (then random_seed is the same at every start)."""
    cmd = info.get("launch_command")
    if not isinstance(cmd, str):
        return True  # cannot tell: do not lean on the seed
    try:
        words = shlex.split(cmd)
    except ValueError:
        return True
    return any(w == "--random-seed" or w.startswith("--random-seed=") for w in words)


@dataclass(frozen=True)
class ServerIdentity:
    """What tells one start of the server from another: its /server_info per-start signals (as the server sent
    them; absent ones are None) and, with a control API, its restart count, pid and plan digest."""

    start_time: Any = None
    startup_time: JsonObject | None = None
    random_seed: Any = None
    restarts: int | None = None
    pid: Any = None
    digest: str | None = None

    def signals(self) -> JsonObject:
        """The /server_info signals, as a cell's record keeps them (`Cell.server`)."""
        return {key: getattr(self, key) for key in SIGNALS}


def identity_of(info: JsonObject) -> ServerIdentity:
    """The per-start signals in one /server_info answer (absent ones are None)."""
    startup = info.get("startup_time")
    return ServerIdentity(
        start_time=info.get("start_time"),
        startup_time=startup if isinstance(startup, dict) and startup else None,
        random_seed=None if seed_is_pinned(info) else info.get("random_seed"),
    )


def restart_reasons(before: ServerIdentity | None, after: ServerIdentity | None) -> list[str]:
    """Why a repeat cannot be trusted, judged from the server identity before and after it."""
    if after is None:
        return ["server unreachable right after the run (it died or restarted)"]
    if before is None:
        return ["server identity unknown before the run"]
    reasons = []
    for key, what in SIGNALS.items():
        b, a = getattr(before, key), getattr(after, key)
        if b is not None and a is not None and b != a:
            shown = (b, a) if key != "startup_time" else (_short(b), _short(a))
            reasons.append(f"server restarted during the run ({what} {shown[0]} -> {shown[1]})")
    rb, ra = before.restarts, after.restarts
    if isinstance(rb, int) and isinstance(ra, int) and ra > rb:
        reasons.append(f"server restarted during the run (control API restart count {rb} -> {ra})")
    b, a = before.pid, after.pid
    if b and a and b != a:
        reasons.append(f"server restarted during the run (server pid {b} -> {a})")
    b, a = before.digest, after.digest
    if b and a and b != a:
        reasons.append(f"server restarted during the run on another plan (control API digest {b} -> {a})")
    return reasons


def _short(startup: Any) -> str:
    """The scheduler's end-to-end start-up time, enough to tell two starts apart in a message."""
    if isinstance(startup, dict) and isinstance(startup.get("scheduler_e2e"), int | float):
        return f"scheduler_e2e={startup['scheduler_e2e']:.6f}s"
    return "?"


def is_simulated(info: JsonObject) -> bool:
    """The stand-in marks its /server_info; a real SGLang never does."""
    states = info.get("internal_states") or [{}]
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    return bool(info.get("simulated") or first.get("simulated"))
