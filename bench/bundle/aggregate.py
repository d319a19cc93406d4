"""The numbers of a results bundle: one repeat's summary, and the aggregate across repeats.

Keys follow `sglang.benchmark.serving` where they overlap: completed, duration,
total_output_tokens, request_throughput, output_throughput (aggregate tok/s),
{mean,median,std,p90,p99}_{ttft,tpot,itl,e2e_latency}_ms, accept_length. `itl` here is the RAW
gap between streamed chunks (SGLang's own bench divides each gap by the tokens it carried; TPOT
is reported separately). Across repeats every per-repeat number appears as `<key>_mean` /
`<key>_sd`; the bare key is the mean, but completed/failed/duration/total_output_tokens are sums.

Besides, `request_percentiles` gives p50/p90/p99 of TTFT and TPOT over the requests of one concurrency
level's valid repeats pooled together (`ttft_p50_ms`, ..., `tpot_p99_ms`), from the request rows: a
per-repeat `p99_ttft_ms_mean` is the mean of each repeat's own p99 instead. Percentiles interpolate
linearly between closest ranks (bench/report/stats.py `percentile`, numpy's default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.client.request_record import RequestRecord
from bench.report import stats

LATENCY_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": None, "e2e_latency": "e2e_s"}
# per-repeat counts that are summed across repeats (every other number is averaged)
SUMMED_KEYS = ("completed", "failed", "duration", "total_output_tokens")
# the percentiles `request_percentiles` gives, and the request-row field (seconds) each is taken from
POOLED_PERCENTILES = (50, 90, 99)
POOLED_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s"}
# per-repeat numbers that identify the repeat or its server, never measured: not aggregated
SKIP_AGG = {"repeat", "concurrency", "server_start_time", "restarts_before", "restarts_after", "pid_before",
            "pid_after"}


def repeat_summary(records: Sequence[RequestRecord], duration: float) -> dict[str, Any]:
    """One repeat's numbers in sglang.benchmark.serving's key names (plus accept length)."""
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    res: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration,
        "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "output_throughput": out_tokens / duration if duration > 0 else None,
    }
    for name, attr in LATENCY_METRICS.items():
        if attr is None:
            values: list[float | None] = [g for r in ok for g in r.chunk_gaps_s]
        else:
            values = [getattr(r, attr) for r in ok]
        dist = stats.distribution(values)
        for stat, v in dist.items():
            res[f"{stat}_{name}_ms"] = None if v is None else v * 1000.0
    per_req = stats.distribution([r.output_tps for r in ok])
    res["mean_request_output_throughput"] = per_req["mean"]
    res["median_request_output_throughput"] = per_req["median"]
    accepts = [r.accept_length for r in ok if r.accept_length is not None]
    verify = sum(r.spec_verify_ct or 0 for r in ok)
    if accepts and verify:
        # token-weighted: all tokens over all verify passes of the repeat
        res["accept_length"] = sum(r.completion_tokens or 0 for r in ok if r.spec_verify_ct) / verify
        res["accept_length_source"] = "meta_info"
    else:
        res["accept_length"] = None
        res["accept_length_source"] = None
    res["chunks"] = sum(r.chunks for r in ok)
    return res


def schema_keys() -> list[str]:
    """Every per-repeat number a result file always carries (None when not measured)."""
    keys = [k for k in repeat_summary([], 1.0) if k != "accept_length_source"]
    return [*keys, "client_cpu_us_per_chunk"]


def numeric_keys(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The keys whose value is a number in any row, in the order first seen."""
    keys: dict[str, None] = {}
    for row in rows:
        for k, v in row.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                keys.setdefault(k, None)
    return list(keys)


def aggregate(repeats: Sequence[Mapping[str, Any]], valid: bool) -> dict[str, Any]:
    """Across repeats: bare key = mean (sum for counts), plus <key>_mean and <key>_sd. All None if invalid."""
    good = [r for r in repeats if r.get("valid")]
    keys = [k for k in dict.fromkeys([*schema_keys(), *numeric_keys(repeats)]) if k not in SKIP_AGG]
    out: dict[str, Any] = {}
    for k in keys:
        mean, sd = stats.mean_sd(r.get(k) for r in good) if valid else (None, None)
        out[f"{k}_mean"], out[f"{k}_sd"] = mean, sd
        if k in SUMMED_KEYS:
            out[k] = sum(r.get(k) or 0 for r in good) if valid else None
        else:
            out[k] = mean
    sources = {r.get("accept_length_source") for r in good if r.get("accept_length_source")}
    out["accept_length_source"] = ",".join(sorted(sources)) if sources and valid else None
    out["repeats_valid"] = len(good)
    return out


def pooled_key(name: str, q: int) -> str:
    """The key of one pooled percentile: `ttft_p50_ms`, `tpot_p99_ms`, ..."""
    return f"{name}_p{q}_ms"


POOLED_KEYS = [pooled_key(name, q) for name in POOLED_METRICS for q in POOLED_PERCENTILES]


def request_percentiles(requests: Iterable[Mapping[str, Any]], repeats: Iterable[Mapping[str, Any]],
                        concurrency: int) -> dict[str, float | None]:
    """p50/p90/p99 (ms) of TTFT and TPOT over the ok requests of the valid repeats at one concurrency level.

    `requests`: a cell's request rows (each with concurrency, repeat, ok, ttft_s, tpot_s); `repeats`: its
    per-repeat summaries (concurrency, repeat, valid). A row counts when it is ok and its (concurrency,
    repeat) is a valid repeat's; rows without a repeat index (or values) count for nothing, so a bundle
    whose rows lack them gets None. Linear interpolation between closest ranks (stats.percentile)."""
    good = {r.get("repeat") for r in repeats if r.get("valid") and r.get("concurrency") == concurrency}
    good.discard(None)
    rows = [r for r in requests
            if r.get("ok") is True and r.get("concurrency") == concurrency and r.get("repeat") in good]
    out: dict[str, float | None] = {}
    for name, field in POOLED_METRICS.items():
        values = [r.get(field) for r in rows]
        for q in POOLED_PERCENTILES:
            v = stats.percentile(values, q)
            out[pooled_key(name, q)] = None if v is None else v * 1000.0
    return out
