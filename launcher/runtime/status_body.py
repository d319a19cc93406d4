"""The /status body (bodies.ServerStatus), assembled from what the lifecycle keeps and what lies beside it
(the history, the tune hold, the patch check, the build facts)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from launcher.runtime.admission import patch_check
from launcher.runtime.api import metrics, tune_hold
from launcher.runtime.api.bodies import RetryView, ServerStatus, StateEvent
from launcher.runtime.core.decisions import shown_health
from launcher.runtime.core.states import Phase
from launcher.runtime.core.transitions import Move, Retry


class _SwitchView(Protocol):
    phase: Phase | None
    server_changed_at: float


class StatusSource(metrics.LifecycleView, Protocol):
    """What /status reads of the lifecycle (launcher/runtime/lifecycle.py `Lifecycle`), besides what /metrics
    reads: the collector and the body name the reads, not the class."""

    sd: Path
    since: float
    health: str
    health_at: float | None
    retry: Retry
    pid: int
    last_error: str | None
    decode_allreduce: dict | None
    events: tuple[Move, ...]
    switcher: _SwitchView


def server_status(lc: StatusSource) -> ServerStatus:
    """/status: the running plan, the state and its last moves, the health reading of the server that runs now,
    restarts, backends, the history's tail and the switch counts."""
    cur = lc.current
    hist, skipped = lc.history_view()
    counts = lc.switch_counts_now()
    now = time.time()
    held = tune_hold.current(lc.sd, now)
    return ServerStatus(
        profile=cur.name if cur else None,
        spec=cur.spec if cur else None,
        spec_params=cur.spec_params if cur else None,
        digest=cur.digest() if cur else None,
        state=lc.state,
        phase=lc.switcher.phase,
        since=lc.since,
        since_iso=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lc.since)),
        health=shown_health(lc.health, lc.health_at, lc.switcher.server_changed_at),
        health_age_s=lc.health_age_s(),
        restarts=lc.restarts,
        retry=RetryView(attempts=lc.retry.attempts, next_at=lc.retry.next_at),
        pid=lc.pid,
        server_url=cur.server_url if cur else None,
        last_error=lc.last_error,
        patch_check=patch_check(),
        backends=lc.backends,
        decode_allreduce=lc.decode_allreduce,
        spec_adaptive=lc.spec_adaptive(),
        history=hist,
        history_skipped=skipped,
        switches=counts.as_status() if counts is not None else None,
        build=metrics.build_info(),
        tune_hold=held.view(now) if held else None,
        events=[StateEvent(at=m.at, to=m.to, why=m.why, **{"from": m.from_}) for m in lc.events],
    )
