"""The load view of a bundle: one `LoadPoint` per cell and load level (each concurrency level, each open-loop
rate), the per-user against total throughput frontier, and summary.md's section and load.csv of them.

* total tok/s: the level's output tok/s, all requests together (mean over its valid repeats);
* per-user tok/s: what one request sees, the median over the requests of a repeat of completion tokens over
  their e2e time (TTFT included), mean over the valid repeats;
* p99 TTFT and TPOT: pooled over the requests of the level's valid repeats (bench/bundle/aggregate.py
  `request_percentiles`);
* queue p99: the server's own queue wait (SGLang's `queue_time`, with `--enable-metrics`), p99 per repeat;
* offered rate: the open-loop rate asked for; achieved: the rate the requests were sent at, and completed: the
  requests over the repeat's time (a server that cannot keep up completes fewer than were offered).

A point is on the frontier when no other valid, not-FAIL point of the bundle has at least its per-user and its
total tok/s and more of one: the loads where trading one for the other is a real choice (vLLM's
`sweep plot_pareto` draws the same two axes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import names as bundle_names
from bench.bundle import store as bundle
from bench.bundle.cell_numbers import Level
from bench.bundle.schema import Cell, Manifest
from bench.report import tables
from bench.report.summary_rows import STATUS_OF
from bench.report.tables import fmt

CSV_FILE = "load.csv"
FRONTIER_PNG = "frontier.png"
LATENCY_RATE_PNG = "latency_rate.png"


@dataclass(frozen=True, kw_only=True)
class LoadPoint:
    """One cell at one load: its label, status and the numbers the load view shows."""

    cell: str  # `fused+eagle3(1,1,2)`
    status: str  # OK, FAIL, UNVERIFIED or INVALID (summary_rows)
    load: str  # `c=4` or `rate=2`
    concurrency: int | None
    request_rate: float | None
    achieved_rate: float | None
    completed_rate: float | None
    total_tps: float | None
    per_user_tps: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    running_max: float | None
    queue_p99_ms: float | None = None  # the server's own queue wait, p99 (mean over repeats), where it reports it
    frontier: bool = False

    @property
    def drawable(self) -> bool:
        """Valid, not failed by the gate, with both throughputs: a point the frontier may hold."""
        return self.status not in ("INVALID", "FAIL") and self.total_tps is not None and self.per_user_tps is not None


def _point(cell: Cell, label: str, status: str, level: Level, pooled: dict[str, float | None], *,
           concurrency: int | None = None, rate: float | None = None) -> LoadPoint:
    return LoadPoint(
        cell=label, status=status, load=f"c={concurrency}" if rate is None else f"rate={rate:.4g}",
        concurrency=concurrency, request_rate=rate, achieved_rate=level.mean("achieved_rate"),
        completed_rate=level.mean("request_throughput"), total_tps=level.mean("output_throughput"),
        per_user_tps=level.mean("median_request_output_throughput"), ttft_p99_ms=pooled.get("ttft_p99_ms"),
        tpot_p99_ms=pooled.get("tpot_p99_ms"), running_max=level.mean("running_max"),
        queue_p99_ms=level.mean("p99_queue_time_ms"))


def points(cells: list[Cell], run_dir: str | Path | None = None) -> list[LoadPoint]:
    """Every cell's points, closed-loop levels first, then its rates in order; the frontier marked."""
    out = []
    for c in cells:
        label = bundle_names.cell_label(c.profile, c.spec, c.spec_params)
        status = "INVALID" if not c.valid else STATUS_OF.get(c.correctness.status, "OK")
        rows = (bundle.read_requests(Path(run_dir), c.profile, c.spec, c.spec_params)
                if run_dir is not None and c.valid else [])
        for level in c.concurrency_levels:
            pooled = bundle_aggregate.request_percentiles(rows, c.per_repeat, level)
            out.append(_point(c, label, status, c.level(level), pooled, concurrency=level))
        for rate in sorted(c.rate_levels):  # in the order of the load (a search probes them in another)
            pooled = bundle_aggregate.request_percentiles(rows, c.per_repeat, None, rate)
            out.append(_point(c, label, status, c.rate_level(rate), pooled, rate=rate))
    return mark_frontier(out)


def mark_frontier(pts: list[LoadPoint]) -> list[LoadPoint]:
    """The points, each `frontier` when no drawable point dominates it (module docstring)."""
    good = [p for p in pts if p.drawable]

    def dominated(p: LoadPoint) -> bool:
        return any(q.per_user_tps >= p.per_user_tps and q.total_tps >= p.total_tps  # type: ignore[operator]
                   and (q.per_user_tps > p.per_user_tps or q.total_tps > p.total_tps)  # type: ignore[operator]
                   for q in good)

    return [replace(p, frontier=p.drawable and not dominated(p)) for p in pts]


def several_loads(manifest: Manifest, cells: list[Cell]) -> bool:
    """Whether the bundle measured two or more loads (what the load view and its plots need)."""
    rates = {r for c in cells for r in c.rate_levels}
    return len(manifest.levels) + len(rates) >= 2


def sla_targets(manifest: Manifest) -> tuple[float | None, float | None]:
    """The p99 TTFT and TPOT targets (ms) the run was given (`bench sla`), else None each."""
    extra = manifest.settings.model_extra or {}

    def number(key: str) -> float | None:
        v = extra.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return number("ttft_p99_ms"), number("tpot_p99_ms")


def markdown_lines(manifest: Manifest, cells: list[Cell], pts: list[LoadPoint]) -> list[str]:
    """summary.md's load section (only for a bundle with several loads): the table, then the two plots."""
    if not several_loads(manifest, cells):
        return []
    lines = ["", "## Load: per-user against total throughput", "",
             "| cell | load | status | offered req/s | sent req/s | completed req/s | total tok/s | per-user tok/s "
             "| TTFT p99 ms | TPOT p99 ms | queue p99 ms | running (most) | frontier |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in pts:
        lines.append(f"| {p.cell} | {p.load} | {p.status} | {fmt(p.request_rate, 2)} | {fmt(p.achieved_rate, 2)} "
                     f"| {fmt(p.completed_rate, 2)} | {fmt(p.total_tps, 1)} | {fmt(p.per_user_tps, 1)} "
                     f"| {fmt(p.ttft_p99_ms, 1)} | {fmt(p.tpot_p99_ms, 1)} | {fmt(p.queue_p99_ms, 1)} | {fmt(p.running_max, 0)} "
                     f"| {'yes' if p.frontier else ''} |")
    lines += ["", f"![per-user against total tok/s]({FRONTIER_PNG})", "",
              f"{FRONTIER_PNG}: each cell's loads, per-user tok/s (x) against total tok/s (y); the frontier (black) "
              "joins the points no other valid, not-FAIL point beats on both. Up and to the right is better: along "
              "the frontier, more users cost each of them speed."]
    if any(c.rate_levels for c in cells):
        lines += ["", f"![p99 latency against offered rate]({LATENCY_RATE_PNG})", "",
                  f"{LATENCY_RATE_PNG}: p99 TTFT and p99 TPOT against the offered open-loop rate, one line per cell, "
                  "with the SLA targets as dashed lines when the run had them: the highest rate below both lines is "
                  "the load that cell holds."]
    return lines


CSV_FIELDS = [f.name for f in fields(LoadPoint)]


def csv_text(pts: list[LoadPoint]) -> str:
    return tables.csv_text([{k: getattr(p, k) for k in CSV_FIELDS} for p in pts], CSV_FIELDS)
