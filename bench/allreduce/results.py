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

from typing import Any

import numpy as np

from bench.allreduce import exact
from bench.allreduce.floor import Link, floor_us
from bench.allreduce.launch import BackendRun

COLUMNS = ("size_B", "count", "type", "time_us", "time_us_p50", "time_us_p99", "algbw_GBps", "busbw_GBps", "wrong")
"""Table columns, in nccl-tests' order. Units: bytes, elements, microseconds, GB/s (1e9 B/s)."""


def bus_factor(nranks: int) -> float:
    return 2.0 * (nranks - 1) / nranks


def _sig(value: float, digits: int = 6) -> float:
    """Round to significant digits: CPU runs give bandwidths far below 0.01 GB/s."""
    return float(f"{value:.{digits}g}")


def _base(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "backend": run["backend"],
        "profile": run["profile"],
        "nranks": run["nranks"],
        "graph": run["graph"],
        "type": run["dtype"],
    }


def _tokens(size: int, hidden: int, elem: int) -> int | None:
    return size // (hidden * elem) if size % (hidden * elem) == 0 else None


def rows_for(
    run_fields: dict[str, Any], outcome: BackendRun, elem: int, link: Link | None
) -> list[dict[str, Any]]:
    """Rows for one backend run: measured, skipped (whole backend or one size), or failed."""
    base = _base(run_fields)
    verdict = exact_verdict(run_fields, outcome)
    base["exact"] = verdict["text"]
    if "first_wrong" in verdict:
        base["exact_first_wrong"] = verdict["first_wrong"]
    if outcome.status != "ok":
        status = "skipped" if outcome.status == "unavailable" else "failed"
        return [{**base, "status": status, "reason": outcome.reason}]
    graph = run_fields["graph"] and run_fields["device_type"] == "cuda"
    base["graph"] = graph
    first = outcome.ranks[0]
    meta = {**first.get("versions", {}), "env": first.get("env_applied", {})}
    rows = []
    for i, size in enumerate(run_fields["sizes"]):
        per_rank = [r["rows"][i] for r in outcome.ranks]
        row: dict[str, Any] = {
            **base,
            "size_B": size,
            "count": per_rank[0]["count"],
            "tokens": _tokens(size, run_fields["hidden"], elem),
            **meta,
        }
        skipped = next((r["skipped"] for r in per_rank if "skipped" in r), None)
        if skipped:
            rows.append({**row, "status": "skipped", "reason": skipped})
            continue
        checks = [r["exact"] for r in per_rank if "exact" in r]
        if checks:
            row["exact_size"] = {
                "calls": len(checks[0]["calls"]),
                "wrong": int(sum(c["wrong"] for c in checks)),
                "identical": all(len({c["calls"][j]["digest"] for c in checks}) == 1
                                 for j in range(len(checks[0]["calls"]))),
                "path": [f"{c['path']}: {c['path_evidence']}" for c in checks],
            }
        if "samples_us" not in per_rank[0]:  # --exact-only: checked, not timed
            rows.append({**row, "status": "checked", "wrong": int(sum(r.get("wrong", 0) for r in per_rank))})
            continue
        samples = np.max(np.array([r["samples_us"] for r in per_rank], dtype=float), axis=0)
        time_us = float(np.mean([r["mean_us"] for r in per_rank]))
        algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
        row.update(
            status="ok",
            time_us=round(time_us, 3),
            time_us_per_rank=[round(float(r["mean_us"]), 3) for r in per_rank],
            host_launch_us=round(float(np.mean([r.get("launch_us", 0.0) for r in per_rank])), 3),
            time_us_p50=round(float(np.percentile(samples, 50)), 3),
            time_us_p99=round(float(np.percentile(samples, 99)), 3),
            time_us_sample_mean=round(float(samples.mean()), 3),
            time_us_sample_sd=round(float(samples.std(ddof=1)) if len(samples) > 1 else 0.0, 3),
            algbw_GBps=_sig(algbw),
            busbw_GBps=_sig(algbw * bus_factor(run_fields["nranks"])),
            wrong=int(sum(r["wrong"] for r in per_rank)),
            samples=int(len(samples)),
            method=per_rank[0]["method"],
        )
        if link is not None:
            row["floor_us"] = round(floor_us(size, run_fields["nranks"], link), 3)
            row["floor_link"] = link.name
        rows.append(row)
    return rows


def exact_verdict(run_fields: dict[str, Any], outcome: BackendRun) -> dict[str, Any]:
    """The backend's exactness verdict (exact.verdict) from its ranks' results."""
    return exact.verdict(run_fields["backend"], outcome.status, outcome.reason, run_fields["nranks"],
                         run_fields["hidden"], run_fields["sizes"], outcome.ranks)
