"""One measured repeat of `bench run`: its numbers, and whether the same server served all of it.

A repeat is invalid when any request errors or its stream breaks, or when the server restarted
during it (its /server_info per-start signals, or the control API's restart count or pid, changed); an
invalid repeat carries its reason and no numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.bundle import aggregate as bundle_aggregate
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import Prompt
from bench.run.server_identity import PROBE_ERRORS, identity_of, restart_reasons
from launcher.errors import RuntimeFailure
from launcher.runtime.api.control_client import ControlClient

METRIC_KEYS_KEPT_WHEN_INVALID = {"completed", "failed", "chunks"}


def null_invalid(rep: dict[str, Any]) -> None:
    """An invalid repeat keeps its counts but no number that could be read as a measurement."""
    for k, v in list(rep.items()):
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in METRIC_KEYS_KEPT_WHEN_INVALID:
            if k not in bundle_aggregate.SKIP_AGG:
                rep[k] = None
    rep["accept_length_source"] = None


async def server_identity(server: ServerClient, control: ControlClient | None) -> dict[str, Any] | None:
    """The server's per-start signals (server_identity.py; with a control API, its restart count and pid
    too) now; None if it is down."""
    try:
        info = await server.server_info()
    except PROBE_ERRORS:
        return None
    ident: dict[str, Any] = identity_of(info)
    if control is not None:
        try:
            st = await control.status()
            ident.update(restarts=st.get("restarts"), pid=st.get("pid"), digest=st.get("digest"))
        except RuntimeFailure:
            pass
    return ident


async def measure_repeat(
    *,
    server: ServerClient,
    control: ControlClient | None,
    prompts: Sequence[Prompt],
    spec: str,
    concurrency: int,
    repeat: int,
    since: dict[str, Any] | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """The repeat's summary (valid or with its reason), one row per request for the requests file, and the
    server's identity after it. `since`: the identity the cell saw last (after its warm-up, or its previous
    repeat): a server restarted in between ran another start, maybe another plan, and the repeat is invalid."""
    before = await server_identity(server, control)
    m0 = await server.metrics_counters()
    cpu0 = time.process_time()
    records, duration = await server.run(prompts, concurrency, on_done=on_done)
    cpu = time.process_time() - cpu0
    after = await server_identity(server, control)
    m1 = await server.metrics_counters() if after is not None else None
    rep = bundle_aggregate.repeat_summary(records, duration)
    rep.update(repeat=repeat, concurrency=concurrency)
    rep["client_cpu_us_per_chunk"] = cpu / rep["chunks"] * 1e6 if rep["chunks"] else None
    if rep["accept_length"] is None and spec != "off" and m0 and m1:
        dv = m1.get("sglang:spec_verify_calls_total", 0.0) - m0.get("sglang:spec_verify_calls_total", 0.0)
        dt = m1.get("sglang:generation_tokens_total", 0.0) - m0.get("sglang:generation_tokens_total", 0.0)
        if dv > 0:
            rep["accept_length"], rep["accept_length_source"] = dt / dv, "metrics"
    reasons = []
    failed = [x for x in records if not x.ok]
    if failed:
        reasons.append(f"{len(failed)} of {len(records)} requests failed (first: {failed[0].error})")
    if since is not None and before is not None:
        reasons += [r.replace("during the run", "since the cell's previous step") for r in restart_reasons(since, before)]
    reasons += restart_reasons(before, after)
    rep["valid"] = not reasons
    rep["invalid_reason"] = "; ".join(reasons) or None
    rep["server_start_time"] = (before or {}).get("start_time")
    rep["restarts_before"] = (before or {}).get("restarts")
    rep["restarts_after"] = (after or {}).get("restarts")
    if not rep["valid"]:
        null_invalid(rep)
    rows = []
    for rec in records:
        row = rec.to_json()
        row.update(concurrency=concurrency, repeat=repeat)
        rows.append(row)
    return rep, rows, after
