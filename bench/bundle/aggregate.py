"""The numbers of a results bundle: one repeat's summary, and the aggregate across repeats.

Keys follow `sglang.benchmark.serving` where they overlap: completed, duration,
total_output_tokens, request_throughput, output_throughput (aggregate tok/s),
{mean,median,std,p90,p99}_{ttft,tpot,itl,e2e_latency}_ms, accept_length. `itl` here is the RAW
gap between streamed chunks (SGLang's own bench divides each gap by the tokens it carried; TPOT
is reported separately). A repeat is a `RepeatSummary` (each latency metric a `Percentiles`), a level
across repeats a `Level` (bench/bundle/schema.py): per number a `Spread`, on disk `<key>_mean` /
`<key>_sd` and the bare key, the mean, but completed/failed/duration/total_output_tokens are sums.

Besides, `request_percentiles` gives p50/p90/p99 of TTFT and TPOT over the requests of one concurrency
level's valid repeats pooled together (`ttft_p50_ms`, ..., `tpot_p99_ms`), from the request rows: a
per-repeat `p99_ttft_ms_mean` is the mean of each repeat's own p99 instead. Percentiles interpolate
linearly between closest ranks (bench/bundle/summary_stats.py `percentile`, numpy's default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bench.bundle import acceptance
from bench.bundle import summary_stats as stats
from bench.bundle.cell_numbers import (
    DIST_STATS,
    LATENCY_METRICS,
    SKIP_AGG,
    Level,
    Percentiles,
    RepeatSummary,
    Spread,
    flat_key,
)
from bench.client.request_record import RequestRecord

# the request-record field (seconds) each latency metric of a repeat is taken from; None: the chunk gaps
LATENCY_FIELDS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": None, "e2e_latency": "e2e_s"}
assert tuple(LATENCY_FIELDS) == LATENCY_METRICS and tuple(stats.DIST_STATS) == DIST_STATS
# per-repeat counts that are summed across repeats (every other number is averaged)
SUMMED_KEYS = ("completed", "failed", "duration", "total_output_tokens")
# the percentiles `request_percentiles` gives, and the request-row field (seconds) each is taken from
POOLED_PERCENTILES = (50, 90, 99)
POOLED_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s"}
__all__ = ["SKIP_AGG", "Level", "Percentiles", "RepeatSummary", "Spread", "aggregate", "repeat_summary"]


def percentiles(values_s: Iterable[float | None]) -> Percentiles:
    """The distribution (stats.distribution) of values given in seconds, in ms."""
    return Percentiles(**{k: None if v is None else v * 1000.0 for k, v in stats.distribution(values_s).items()})


def repeat_summary(records: Sequence[RequestRecord], duration: float) -> RepeatSummary:
    """One repeat's numbers in sglang.benchmark.serving's key names (plus accept length)."""
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    latency = {name: percentiles([g for r in ok for g in r.chunk_gaps_s] if attr is None
                                 else [getattr(r, attr) for r in ok])
               for name, attr in LATENCY_FIELDS.items()}
    per_req = stats.distribution([r.output_tps for r in ok])
    accepts = [r.accept_length for r in ok if r.accept_length is not None]
    verify = sum(r.spec_verify_ct or 0 for r in ok)
    # token-weighted: all tokens over all verify passes of the repeat
    accept = sum(r.completion_tokens or 0 for r in ok if r.spec_verify_ct) / verify if accepts and verify else None
    return RepeatSummary(
        completed=len(ok), failed=len(records) - len(ok), duration=duration, total_output_tokens=out_tokens,
        request_throughput=len(ok) / duration if duration > 0 else None,
        output_throughput=out_tokens / duration if duration > 0 else None,
        **latency,
        mean_request_output_throughput=per_req["mean"], median_request_output_throughput=per_req["median"],
        accept_length=accept, accept_length_source="meta_info" if accept is not None else None,
        spec_correct_drafts_histogram=acceptance.pool(r.spec_correct_drafts_histogram for r in ok),
        chunks=sum(r.chunks for r in ok),
    )


def schema_keys() -> list[str]:
    """Every per-repeat number a result file always carries (None when not measured), in their on-disk order."""
    keys = ["completed", "failed", "duration", "total_output_tokens", "request_throughput", "output_throughput"]
    keys += [flat_key(stat, name) for name in LATENCY_METRICS for stat in DIST_STATS]
    return [*keys, "mean_request_output_throughput", "median_request_output_throughput", "accept_length", "chunks",
            "client_cpu_us_per_chunk"]


def aggregate(repeats: Sequence[RepeatSummary], valid: bool, concurrency: int | None = None,
              request_rate: float | None = None) -> Level:
    """Across repeats, per number: its mean (sum for counts), mean and sample sd. All None if invalid."""
    numbers = [r.numbers() for r in repeats]
    good = [n for r, n in zip(repeats, numbers, strict=True) if r.valid]
    keys = [k for k in dict.fromkeys([*schema_keys(), *(k for n in numbers for k in n)]) if k not in SKIP_AGG]
    spreads: dict[str, Spread] = {}
    for k in keys:
        mean, sd = stats.mean_sd(n.get(k) for n in good) if valid else (None, None)
        total = sum(n.get(k) or 0 for n in good) if valid else None
        spreads[k] = Spread(value=total if k in SUMMED_KEYS else mean, mean=mean, sd=sd)
    sources = {r.accept_length_source for r in repeats if r.valid and r.accept_length_source}
    return Level.of(spreads, concurrency=concurrency, request_rate=request_rate, repeats_valid=len(good),
                    accept_length_source=",".join(sorted(sources)) if sources and valid else None)


def pooled_key(name: str, q: int) -> str:
    """The key of one pooled percentile: `ttft_p50_ms`, `tpot_p99_ms`, ..."""
    return f"{name}_p{q}_ms"


POOLED_KEYS = [pooled_key(name, q) for name in POOLED_METRICS for q in POOLED_PERCENTILES]


def request_percentiles(requests: Iterable[RequestRecord], repeats: Iterable[RepeatSummary],
                        concurrency: int) -> dict[str, float | None]:
    """p50/p90/p99 (ms) of TTFT and TPOT over the ok requests of the valid repeats at one concurrency level.

    `requests`: a cell's request rows; `repeats`: its per-repeat summaries. A row counts when it is ok and its
    (concurrency, repeat) is a valid repeat's; rows without a repeat index (or values) count for nothing, so a
    bundle whose rows lack them gets None. Linear interpolation between closest ranks (stats.percentile)."""
    good = {r.repeat for r in repeats if r.valid and r.concurrency == concurrency}
    good.discard(None)
    return _pooled([r for r in requests if r.ok is True and r.concurrency == concurrency and r.repeat in good])


def rate_percentiles(requests: Iterable[RequestRecord], repeats: Iterable[RepeatSummary],
                     request_rate: float) -> dict[str, float | None]:
    """`request_percentiles` at one open-loop rate: over the ok rows of the valid repeats at `request_rate`."""
    good = {r.repeat for r in repeats if r.valid and r.request_rate == request_rate}
    good.discard(None)
    return _pooled([r for r in requests if r.ok is True and r.request_rate == request_rate and r.repeat in good])


def _pooled(rows: Sequence[RequestRecord]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, field in POOLED_METRICS.items():
        values = [getattr(r, field) for r in rows]
        for q in POOLED_PERCENTILES:
            v = stats.percentile(values, q)
            out[pooled_key(name, q)] = None if v is None else v * 1000.0
    return out
