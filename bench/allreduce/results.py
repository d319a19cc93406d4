"""Turn per-rank samples into nccl-tests-style rows (one per backend and size).

time_us, the headline: nccl-tests' definition, each rank's wall clock over a pipelined loop / calls,
averaged over ranks (nccl-tests -a 1). time_us_p50/p99: per iteration the slowest rank's per-call
sample (the collective is done when its last rank is), then percentiles over iterations.
algbw = size / time_us; busbw = algbw * 2(n-1)/n (nccl-tests' factor, which makes busbw comparable
with link bandwidth whatever the rank count). wrong = elements that differed from the exact sum, over the
exact check's calls and replays, summed over ranks. exact = the backend's exactness verdict (exact.py:
PASS, FAIL with the first wrong element, or `not run: why`), the same on every row of the backend;
exact_size = what was checked at that size. With --exact-only the rows are `checked`, without times.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench.allreduce import exact
from bench.allreduce.floor import Link, floor_us
from bench.allreduce.records import BackendRun, ExactSize, RankRow, ResultRow, RunSettings, Verdict
from bench.allreduce.sizes import DTYPES

COLUMNS = ("size_B", "count", "type", "time_us", "time_us_p50", "time_us_p99", "algbw_GBps", "busbw_GBps", "wrong")
"""Table columns, in nccl-tests' order. Units: bytes, elements, microseconds, GB/s (1e9 B/s)."""


def bus_factor(nranks: int) -> float:
    return 2.0 * (nranks - 1) / nranks


def _sig(value: float, digits: int = 6) -> float:
    """Round to significant digits: CPU runs give bandwidths far below 0.01 GB/s."""
    return float(f"{value:.{digits}g}")


def _tokens(size: int, hidden: int, elem: int) -> int | None:
    return size // (hidden * elem) if size % (hidden * elem) == 0 else None


def rows_for(run: RunSettings, backend: str, device_type: str, outcome: BackendRun,
             link: Link | None) -> list[ResultRow]:
    """Rows for one backend run: measured, skipped (whole backend or one size), or failed."""
    verdict = exact_verdict(run, backend, outcome)
    head = ResultRow(backend=backend, profile=run.profile, nranks=run.nranks, graph=run.graph, type=run.dtype,
                     status="ok", exact=verdict.text)
    if verdict.first_wrong is not None:
        head = head.model_copy(update={"exact_first_wrong": verdict.first_wrong})
    if outcome.status != "ok":
        status = "skipped" if outcome.status == "unavailable" else "failed"
        return [head.model_copy(update={"status": status, "reason": outcome.reason})]
    first = outcome.ranks[0]
    head = head.model_copy(update={"graph": run.graph and device_type == "cuda", **first.versions,
                                   "env": first.env_applied})
    return [_size_row(run, size, [r.rows[i] for r in outcome.ranks], head, link)
            for i, size in enumerate(run.sizes)]


def _size_row(run: RunSettings, size: int, per_rank: list[RankRow], head: ResultRow,
              link: Link | None) -> ResultRow:
    """One size over every rank: declined, checked only (--exact-only), or checked and timed."""
    row = head.model_copy(update={"size_B": size, "count": per_rank[0].count,
                                  "tokens": _tokens(size, run.hidden, DTYPES[run.dtype])})
    skipped = next((r.skipped for r in per_rank if r.skipped), None)
    if skipped:
        return row.model_copy(update={"status": "skipped", "reason": skipped})
    checked = _exact_size(per_rank)
    if checked is not None:
        row = row.model_copy(update={"exact_size": checked})
    if per_rank[0].samples_us is None:  # --exact-only: checked, not timed
        return row.model_copy(update={"status": "checked", "wrong": int(sum(r.wrong or 0 for r in per_rank))})
    row = row.model_copy(update=_timing(size, run.nranks, per_rank).model_dump())
    if link is None:
        return row
    return row.model_copy(update={"floor_us": round(floor_us(size, run.nranks, link), 3), "floor_link": link.name})


def _exact_size(per_rank: list[RankRow]) -> ExactSize | None:
    """What the ranks' exact checks found at this size; None when none was recorded."""
    checks = [r.exact for r in per_rank if r.exact is not None]
    if not checks:
        return None
    calls = len(checks[0].calls)
    return ExactSize(calls=calls, wrong=int(sum(c.wrong for c in checks)),
                     identical=all(len({c.calls[j].digest for c in checks}) == 1 for j in range(calls)),
                     path=[f"{c.path}: {c.path_evidence}" for c in checks])


class Timing(BaseModel):
    """A timed size's figures over every rank (module docstring), as they go into its row."""

    model_config = ConfigDict(frozen=True)

    status: Literal["ok"] = "ok"
    time_us: float
    time_us_per_rank: list[float]
    host_launch_us: float
    time_us_p50: float
    time_us_p99: float
    time_us_sample_mean: float
    time_us_sample_sd: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    samples: int
    method: str | None


def _timing(size: int, nranks: int, per_rank: list[RankRow]) -> Timing:
    samples = np.max(np.array([r.samples_us for r in per_rank], dtype=float), axis=0)
    time_us = float(np.mean([r.mean_us for r in per_rank]))
    algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return Timing(
        time_us=round(time_us, 3),
        time_us_per_rank=[round(float(r.mean_us or 0.0), 3) for r in per_rank],
        host_launch_us=round(float(np.mean([r.launch_us or 0.0 for r in per_rank])), 3),
        time_us_p50=round(float(np.percentile(samples, 50)), 3),
        time_us_p99=round(float(np.percentile(samples, 99)), 3),
        time_us_sample_mean=round(float(samples.mean()), 3),
        time_us_sample_sd=round(float(samples.std(ddof=1)) if len(samples) > 1 else 0.0, 3),
        algbw_GBps=_sig(algbw),
        busbw_GBps=_sig(algbw * bus_factor(nranks)),
        wrong=int(sum(r.wrong or 0 for r in per_rank)),
        samples=int(len(samples)),
        method=per_rank[0].method,
    )


def exact_verdict(run: RunSettings, backend: str, outcome: BackendRun) -> Verdict:
    """The backend's exactness verdict (exact.verdict) from its ranks' results."""
    return exact.verdict(backend, outcome, run.nranks, run.hidden, run.sizes)
