"""The deltas of `bench compare`: per (cell, concurrency, metric) B's mean against A's, and whether they differ.

Each row gets Welch's t-test of B's mean against A's over their repeats (mean, sample sd and valid repeats of
each side): `p_value`, two-sided. Which rows differ is decided across the whole comparison by
Benjamini-Hochberg at a 5% false discovery rate (`p_adjusted`, `significant`), so a table of many rows does
not flag some by chance. A side with fewer than 2 repeats gives no p-value: the row is not significant and
its note says why. A row whose two sides ran different loads (each side runs at most its server's
max_running_requests at once, `Cell.max_running_requests`, and queues the rest) says so in its `load_note`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from bench import JsonObject
from bench.bundle import names as bundle_names
from bench.bundle.schema import Cell
from bench.report.stats import benjamini_hochberg, welch
from launcher.profiles.running_requests import SPEC_RUNNING_REQUESTS
from launcher.profiles.spec_params import SpecParams

METRICS = (
    ("tok/s", "output_throughput"),
    ("TPOT ms", "mean_tpot_ms"),
    ("TTFT ms", "mean_ttft_ms"),
    ("accept length", "accept_length"),
)
FDR = 0.05  # Benjamini-Hochberg's false discovery rate across the rows of one comparison
MIN_REPEATS = 2  # a side with fewer gives no spread, so no p-value
CSV = "csv"  # a DeltaRow field's metadata key: False for a field the CSV leaves out


def matched(cells_a: list[Cell], cells_b: list[Cell]) -> list[tuple[Cell, Cell]]:
    """The cells both bundles have, in A's order: the same key (profile, spec, EAGLE-3 point)."""
    index_b = {c.key: c for c in cells_b}
    return [(ca, index_b[ca.key]) for ca in cells_a if ca.key in index_b]


def _level_stats(cell: Cell, level: str, key: str) -> tuple[float | None, float | None, int]:
    agg = cell.level(level)
    if not cell.valid:
        return None, None, 0
    return agg.mean(key), agg.sd(key), int(agg.repeats_valid or 0)


def _few_repeats(na: int, nb: int) -> str:
    sides = " and ".join(f"{side} ({n})" for side, n in (("A", na), ("B", nb)) if n < MIN_REPEATS)
    return f"no p-value: fewer than {MIN_REPEATS} repeats in {sides}"


def _ran(cell: Cell, level: int) -> str:
    cap = cell.max_running_requests
    return f"at most {min(level, cap)} at once (max_running_requests {cap})" if cap is not None else "cap unknown"


def load_note(ca: Cell, cb: Cell, level: int) -> str | None:
    """Why the two sides of a row ran different loads at `level`, None when they ran the same. A side runs
    min(level, its server's max_running_requests) requests at once and queues the rest (their wait is in its
    TTFT): sides whose numbers differ ran different loads, and a side above its cap queued. A side without
    a cap (a bundle written before the bench recorded it) is named when the level is above the cap SGLang
    sets under speculation, where it may have queued."""
    ran_a, ran_b = ca.ran_at_once(level), cb.ran_at_once(level)
    if ran_a is not None and ran_b is not None:
        if ran_a != ran_b:
            return f"different loads: A ran {_ran(ca, level)}, B {_ran(cb, level)}"
        queued = [side for side, ran in (("A", ran_a), ("B", ran_b)) if ran < level]
        if queued:
            return (f"both ran {ran_a} at once, not {level}: above max_running_requests the rest queued "
                    f"(in TTFT) on {' and '.join(queued)}")
        return None
    if ran_a is None and ran_b is None:
        if ca.spec != "off" and level > SPEC_RUNNING_REQUESTS:
            return (f"running cap unknown on A and B (bundles older than the field): under speculation SGLang "
                    f"0.5.23 runs at most {SPEC_RUNNING_REQUESTS} at once unless --max-running-requests is given")
        return None
    known, unknown = ("A", "B") if ran_a is not None else ("B", "A")
    ran = ran_a if ran_a is not None else ran_b
    assert ran is not None
    if ran < level or (ca.spec != "off" and level > SPEC_RUNNING_REQUESTS):
        return (f"loads may differ: {known} ran {_ran(ca if known == 'A' else cb, level)}, {unknown}'s running cap "
                f"is unknown (a bundle older than the field; under speculation SGLang 0.5.23 runs at most "
                f"{SPEC_RUNNING_REQUESTS} at once unless --max-running-requests is given)")
    return None


@dataclass(frozen=True, kw_only=True)
class DeltaRow:
    """One (cell, concurrency, metric) of a comparison: A's and B's mean, sd and valid repeats, B - A, and
    Welch's test. The CSV's columns are these fields in order, but those marked `csv: False`."""

    profile: str
    spec: str  # with the EAGLE-3 point after it
    spec_params: SpecParams | None = field(default=None, metadata={CSV: False})
    concurrency: int
    metric: str
    a: float | None
    a_sd: float | None
    a_n: int
    b: float | None
    b_sd: float | None
    b_n: int
    delta: float | None = None
    delta_pct: float | None = None
    t: float | None = None
    df: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    note: str | None = None
    load_note: str | None = None

    def to_json(self) -> JsonObject:
        return {**asdict(self), "spec_params": self.spec_params.model_dump() if self.spec_params else None}


def _tested(row: DeltaRow, ma: float, sa: float | None, na: int, mb: float, sb: float | None, nb: int) -> DeltaRow:
    """The row with its difference and Welch's test (or the note that says why there is none)."""
    delta = _finite(mb - ma)
    row = replace(row, delta=delta, delta_pct=_finite((mb - ma) / ma * 100.0) if ma else None)
    if delta is None:
        return replace(row, note="out of range (numbers too large to compare)")
    if na < MIN_REPEATS or nb < MIN_REPEATS:
        return replace(row, note=_few_repeats(na, nb))
    test = welch(ma, sa or 0.0, na, mb, sb or 0.0, nb)
    if test is None:
        return replace(row, note="out of range (numbers too large to compare)")
    row = replace(row, t=test.t, df=test.df, p_value=test.p)
    return replace(row, note="no spread on either side") if test.t is None else row


def deltas(cells_a: list[Cell], cells_b: list[Cell], fdr: float = FDR) -> list[DeltaRow]:
    """One entry per (profile, spec, EAGLE-3 point, concurrency, metric) present in both bundles: cells
    match by (profile, spec, spec_params), a cell without a point (older bundles too) only one without.

    Each entry's `p_value` is Welch's t-test (two-sided) of its two means; `significant` is
    Benjamini-Hochberg at `fdr` over every entry with a p-value (`p_adjusted`). An entry without a p-value
    is never significant, and its `note` says why."""
    out = []
    for ca, cb in matched(cells_a, cells_b):
        levels = [lv for lv in ca.by_concurrency if lv in cb.by_concurrency]
        for level in levels:
            for label, key in METRICS:
                ma, sa, na = _level_stats(ca, level, key)
                mb, sb, nb = _level_stats(cb, level, key)
                row = DeltaRow(
                    profile=ca.profile, spec=ca.spec + bundle_names.point_text(ca.spec_params),
                    spec_params=ca.spec_params,
                    concurrency=int(level), metric=label, a=ma, a_sd=sa, a_n=na, b=mb, b_sd=sb, b_n=nb,
                    load_note=load_note(ca, cb, int(level)),
                )
                if not ca.valid or not cb.valid:
                    row = replace(row, note="invalid in " + ("A" if not ca.valid else "B"))
                elif ma is None or mb is None:
                    row = replace(row, note="not measured")
                else:
                    row = _tested(row, ma, sa, na, mb, sb, nb)
                out.append(row)
    significant, adjusted = benjamini_hochberg([r.p_value for r in out], fdr)
    return [replace(row, p_adjusted=adj, significant=sig)
            for row, sig, adj in zip(out, significant, adjusted, strict=True)]


def significance_summary(rows: list[DeltaRow], fdr: float = FDR) -> JsonObject:
    """What the comparison's test was and how many rows it decided."""
    return {"test": "Welch's t-test (two-sided), Benjamini-Hochberg across rows", "fdr": fdr,
            "min_repeats": MIN_REPEATS, "rows": len(rows),
            "rows_tested": sum(r.p_value is not None for r in rows),
            "rows_significant": sum(r.significant for r in rows)}


def _finite(v: float) -> float | None:
    """Differences of huge finite numbers can overflow; JSON output never carries NaN or Infinity."""
    return float(v) if math.isfinite(v) else None


CSV_FIELDS = tuple(f.name for f in fields(DeltaRow) if f.metadata.get(CSV, True))
