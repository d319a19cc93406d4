"""One measured repeat of `bench run`: its numbers, and whether the same server served all of it.

A repeat is invalid when any request errors or its stream breaks, or when the server restarted
during it (its /server_info per-start signals, or the control API's restart count or pid, changed); an
invalid repeat carries its reason and no numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle.cell_numbers import RepeatSummary
from bench.client.arrivals import Arrivals
from bench.client.open_loop import run_open
from bench.client.power import EnergyReading, Nvml, PowerSampler, per_token
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import Prompt
from bench.run.server_identity import PROBE_ERRORS, ServerIdentity, identity_of, restart_reasons
from launcher.errors import RuntimeFailure
from launcher.runtime.api.control_client import ControlClient


def _number(value: object) -> int | float | None:
    """A number the server reported, None for anything else (a repeat records numbers only)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def server_identity(server: ServerClient, control: ControlClient | None) -> ServerIdentity | None:
    """The server's per-start signals (server_identity.py; with a control API, its restart count and pid
    too) now; None if it is down."""
    try:
        info = await server.server_info()
    except PROBE_ERRORS:
        return None
    ident = identity_of(info)
    if control is not None:
        try:
            st = await control.status()
            ident = replace(ident, restarts=st.restarts, pid=st.pid, digest=st.digest)
        except RuntimeFailure:
            pass
    return ident


def rate_over(times: Sequence[float]) -> float | None:
    """Requests per second of sends at `times`: (n - 1) over the span from the first to the last."""
    span = max(times, default=0.0) - min(times, default=0.0)
    return (len(times) - 1) / span if len(times) > 1 and span > 0 else None


async def _send(server: ServerClient, prompts: Sequence[Prompt], load: int | Arrivals, repeat: int, seed: int,
                on_done: Callable[[RequestRecord], None] | None) -> tuple[list[RequestRecord], float, dict[str, object]]:
    """Send the repeat closed loop (`load` requests in flight) or open loop (`load`'s arrivals); the records, the
    wall time, and an open-loop repeat's own numbers (its rates and the server's load meanwhile)."""
    if isinstance(load, int):
        records, duration = await server.run(prompts, load, on_done=on_done)
        return records, duration, {}
    schedule = load.schedule(len(prompts), seed, repeat)
    records, duration, seen = await run_open(server, prompts, load, schedule, on_done=on_done)
    return records, duration, {
        "request_rate": load.rate,
        "achieved_rate": rate_over([r.start_s for r in records]),
        "running_max": seen.running_max, "running_mean": seen.running_mean, "queued_max": seen.queued_max,
        "queued_mean": seen.queued_mean,
    }


def energy_fields(reading: EnergyReading | str | None, output_tokens: int | None) -> dict[str, object]:
    """A repeat's energy numbers from its reading; the reason when NVML gave none; nothing without NVML."""
    if reading is None:
        return {}
    if isinstance(reading, str):
        return {"energy_note": reading}
    return {"energy_joules": reading.total_joules, "average_watts": reading.average_watts,
            "joules_per_token": per_token(reading, output_tokens or 0), "energy_method": reading.method}


async def measure_repeat(
    *,
    server: ServerClient,
    control: ControlClient | None,
    prompts: Sequence[Prompt],
    spec: str,
    concurrency: int | Arrivals,
    repeat: int,
    since: ServerIdentity | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
    seed: int = 0,
    nvml: Nvml | None = None,
) -> tuple[RepeatSummary, list[RequestRecord], ServerIdentity | None]:
    """The repeat's summary (valid or with its reason; an invalid one keeps its counts, but no number that could
    be read as a measurement), each request placed at its level and repeat (for the requests file), and the
    server's identity after it. `concurrency`: the closed loop's requests in flight, or an open loop's arrivals
    (drawn from `seed`, bench/client/arrivals.py). `since`: the identity the cell saw last (after its warm-up,
    or its previous repeat): a server restarted in between ran another start, maybe another plan, and the
    repeat is invalid. With `nvml`, every GPU's energy over the requests (bench/client/power.py)."""
    before = await server_identity(server, control)
    m0 = await server.metrics_counters()
    cpu0 = time.process_time()
    if nvml is None:
        records, duration, open_loop = await _send(server, prompts, concurrency, repeat, seed, on_done)
        reading: EnergyReading | str | None = None
    else:
        async with PowerSampler(nvml) as sampler:
            records, duration, open_loop = await _send(server, prompts, concurrency, repeat, seed, on_done)
        reading = sampler.reading()
    cpu = time.process_time() - cpu0
    after = await server_identity(server, control)
    m1 = await server.metrics_counters() if after is not None else None
    summary = bundle_aggregate.repeat_summary(records, duration)
    accept: dict[str, float | str] = {}  # the accept length from /metrics and its source, when measured there
    if summary.accept_length is None and spec != "off" and m0 and m1:
        dv = m1.get("sglang:spec_verify_calls_total", 0.0) - m0.get("sglang:spec_verify_calls_total", 0.0)
        dt = m1.get("sglang:generation_tokens_total", 0.0) - m0.get("sglang:generation_tokens_total", 0.0)
        if dv > 0:
            accept = {"accept_length": dt / dv, "accept_length_source": "metrics"}
    reasons = []
    failed = [x for x in records if not x.ok]
    if failed:
        reasons.append(f"{len(failed)} of {len(records)} requests failed (first: {failed[0].error})")
    if since is not None and before is not None:
        reasons += [r.replace("during the run", "since the cell's previous step") for r in restart_reasons(since, before)]
    reasons += restart_reasons(before, after)
    level, rate = (concurrency, None) if isinstance(concurrency, int) else (None, concurrency.rate)
    rep = summary.model_copy(update={
        "repeat": repeat, "concurrency": level, **open_loop, **energy_fields(reading, summary.total_output_tokens),
        "client_cpu_us_per_chunk": cpu / summary.chunks * 1e6 if summary.chunks else None, **accept,
        "valid": not reasons, "invalid_reason": "; ".join(reasons) or None,
        "server_start_time": _number(before.start_time if before else None),
        "restarts_before": _count(before.restarts if before else None),
        "restarts_after": _count(after.restarts if after else None),
    })
    rep = RepeatSummary.model_validate(rep.to_json())  # what the servers reported, checked as the record holds it
    return (rep if rep.valid else rep.nulled()), [rec.placed(level, repeat, rate) for rec in records], after
