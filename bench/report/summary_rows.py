"""summary.csv's and summary.md's rows, which the plots draw too: one `SummaryRow` per (profile, spec, EAGLE-3
point, concurrency) of a bundle (`rows`), and the lines of throughput_latency.png (`latency_curves`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import names as bundle_names
from bench.bundle import store as bundle
from bench.bundle.schema import Cell, Manifest
from bench.bundle.verdicts import FAIL, NOT_ENOUGH

BASE = ("baseline", "off")
UNVERIFIED = "UNVERIFIED"  # a valid cell the gate could not vouch for: not OK, not FAIL
STATUS_OF = {FAIL: "FAIL", NOT_ENOUGH: UNVERIFIED}  # the table's status of a verdict

# throughput_latency.png: output tok/s (y) against this per-request latency (x), one point per concurrency level
LATENCY_X = "tpot_p50_ms"
LATENCY_X_LABEL = "median TPOT per request (ms, p50 over the requests of the valid repeats)"


CSV = "csv"  # a SummaryRow field's metadata key: False for a field summary.csv leaves out
CsvValue = str | int | float | bool | None  # what a summary.csv column of a row holds


@dataclass(frozen=True, kw_only=True)
class SummaryRow:
    """One row of summary.csv / summary.md and the plots: a (profile, spec, EAGLE-3 point, concurrency).

    summary.csv's columns are these fields in this order (`CSV_FIELDS`), but those marked `csv: False`."""

    profile: str
    spec: str  # with the point after it: `eagle3(1,1,2)`
    spec_params: str | None  # the point, `1,1,2`; None for the overlay's own
    concurrency: int
    status: str
    valid: bool
    invalid_reason: str | None
    correctness: str | None
    correctness_reasons: list[str] = field(default_factory=list, metadata={CSV: False})
    exact_match_rate: float | None
    first_divergence: int | None
    output_throughput_mean: float | None
    output_throughput_sd: float | None
    speedup_vs_baseline_off: float | None
    mean_ttft_ms_mean: float | None
    mean_ttft_ms_sd: float | None
    mean_tpot_ms_mean: float | None
    mean_tpot_ms_sd: float | None
    # pooled over the requests of the valid repeats (bundle_aggregate.POOLED_KEYS, in that order)
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    mean_itl_ms_mean: float | None
    mean_itl_ms_sd: float | None
    p99_itl_ms_mean: float | None
    mean_e2e_latency_ms_mean: float | None
    accept_length_mean: float | None
    accept_length_sd: float | None
    accept_length_source: str | None
    repeats_valid: int | None
    completed: int | None
    plan_digest: str | None
    switch_outcome: str | None
    simulated: bool

    def pooled(self, key: str) -> float | None:
        """One pooled percentile by its key (`ttft_p50_ms`, ...)."""
        value: float | None = getattr(self, key)
        return value

    def csv_values(self) -> dict[str, CsvValue]:
        """The row's summary.csv columns by name."""
        return {name: getattr(self, name) for name in CSV_FIELDS}


CSV_FIELDS = [f.name for f in fields(SummaryRow) if f.metadata.get(CSV, True)]


def rows(manifest: Manifest, cells: list[Cell], run_dir: str | Path | None = None) -> list[SummaryRow]:
    """One row per (profile, spec, EAGLE-3 point, concurrency) with everything the tables and plots show;
    a cell at a point shows it after its spec (`eagle3(1,1,2)`), so two points are two rows and two bars.
    The pooled TTFT/TPOT percentiles come from the bundle's request files in `run_dir` (None without it)."""
    base_tps: dict[str, float] = {}
    for c in cells:
        if (c.profile, c.spec) == BASE and not c.spec_params and c.valid:
            for level, agg in c.by_concurrency.items():
                if agg.mean("output_throughput"):
                    base_tps[level] = agg.mean("output_throughput")
    out = []
    levels = [str(x) for x in manifest.settings.concurrency]
    for c in cells:
        corr, point = c.correctness, bundle_names.point_text(c.spec_params)
        requests = (bundle.read_requests(Path(run_dir), c.profile, c.spec, c.spec_params)
                    if run_dir is not None and c.valid else [])
        for level in levels:
            agg = c.level(level)
            pooled = bundle_aggregate.request_percentiles(requests, c.per_repeat, int(level))
            valid = c.valid
            status = "INVALID" if not valid else STATUS_OF.get(corr.status, "OK")
            tps = agg.mean("output_throughput")
            ref = base_tps.get(level)
            out.append(
                SummaryRow(
                    profile=c.profile,
                    spec=c.spec + point,
                    spec_params=point[1:-1] or None,
                    concurrency=int(level),
                    status=status,
                    valid=valid,
                    invalid_reason=c.invalid_reason,
                    correctness=corr.status,
                    correctness_reasons=corr.reasons,
                    exact_match_rate=corr.exact_match_rate,
                    first_divergence=corr.first_divergence,
                    output_throughput_mean=tps,
                    output_throughput_sd=agg.sd("output_throughput"),
                    speedup_vs_baseline_off=tps / ref if valid and tps and ref else None,
                    mean_ttft_ms_mean=agg.mean("mean_ttft_ms"),
                    mean_ttft_ms_sd=agg.sd("mean_ttft_ms"),
                    mean_tpot_ms_mean=agg.mean("mean_tpot_ms"),
                    mean_tpot_ms_sd=agg.sd("mean_tpot_ms"),
                    **pooled,
                    mean_itl_ms_mean=agg.mean("mean_itl_ms"),
                    mean_itl_ms_sd=agg.sd("mean_itl_ms"),
                    p99_itl_ms_mean=agg.mean("p99_itl_ms"),
                    mean_e2e_latency_ms_mean=agg.mean("mean_e2e_latency_ms"),
                    accept_length_mean=agg.mean("accept_length"),
                    accept_length_sd=agg.sd("accept_length"),
                    accept_length_source=agg.accept_length_source,
                    repeats_valid=agg.repeats_valid,
                    completed=agg.value("completed"),
                    plan_digest=c.plan_digest,
                    switch_outcome=(c.switch or {}).get("outcome"),
                    simulated=c.simulated,
                )
            )
    return out


def latency_curves(table: list[SummaryRow]) -> dict[str, list[SummaryRow]]:
    """throughput_latency.png's lines: per cell (`profile+spec`), its valid levels that have both numbers, by
    concurrency; a cell with no such level has no line."""
    curves: dict[str, list[SummaryRow]] = {}
    for r in table:
        if r.valid and r.pooled(LATENCY_X) is not None and r.output_throughput_mean is not None:
            curves.setdefault(f"{r.profile}+{r.spec}", []).append(r)
    return {k: sorted(v, key=lambda r: r.concurrency) for k, v in curves.items()}
