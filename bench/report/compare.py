"""`bench compare DIR_A DIR_B [--force] [--json | --csv]`: per-(profile, spec) deltas, and whether they are real.

Each row (cell, concurrency, metric) gets Welch's t-test of B's mean against A's over their repeats
(mean, sample sd and valid repeats of each side): `p_value`, two-sided. Which rows differ is decided
across the whole comparison by Benjamini-Hochberg at a 5% false discovery rate (`p_adjusted`,
`significant`), so a table of many rows does not flag some by chance. A side with fewer than 2
repeats gives no p-value: the row is not significant and its note says why.
Two bundles are only comparable when their fingerprints agree: GPU names, driver, SGLang version,
simulated or not, and the setup of every (profile, spec) both measured (its setup digest: env,
flags, patches and the models' identity, without the model paths, host and port; the plan digest
for a bundle written before setup digests existed). Otherwise the command refuses (exit 2) and
lists the differences; --force prints them and compares anyway. Host-local values that differ
(model path, port, ...) are listed as information, never refused, and so is the correctness gate: each
cell's verdict and statistics on both hosts (bench/run/logprob_gate.py), and the thresholds where the two
bundles were gated differently. A row whose two sides ran different loads (each side runs at most its
server's max_running_requests at once, `Cell.max_running_requests`, and queues the rest) says so in its
`load_note`, and the table prints a warning for it (`load_note`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from typing import ClassVar

from rich.console import Console
from rich.table import Table

from bench import JsonObject
from bench.args import CliArgs, entry_point
from bench.bundle import names as bundle_names
from bench.bundle import store as bundle
from bench.bundle.schema import Cell, Manifest
from bench.report import tables
from bench.report.stats import benjamini_hochberg, welch
from launcher.errors import UserError
from launcher.profiles.running_requests import SPEC_RUNNING_REQUESTS

METRICS = (
    ("tok/s", "output_throughput"),
    ("TPOT ms", "mean_tpot_ms"),
    ("TTFT ms", "mean_ttft_ms"),
    ("accept length", "accept_length"),
)


@dataclass(frozen=True)
class Setup:
    """What a cell ran, as `bench compare` matches it: digests, and the host-local values shown only."""

    setup_digest: str | None
    plan_digest: str | None
    local: dict[str, str]


@dataclass(frozen=True)
class Fingerprint:
    """What must agree for two bundles to be comparable; `setups` by cell key."""

    gpu_names: list[str] | str
    driver: str | None
    sglang_version: str | None
    simulated: bool
    setups: dict[str, Setup]

    LABELS: ClassVar[dict[str, str]] = {"gpu_names": "GPU names", "driver": "driver",
                                        "sglang_version": "sglang version", "simulated": "simulated"}


def _setup(cell: Cell) -> Setup:
    return Setup(setup_digest=cell.setup_digest, plan_digest=cell.plan_digest, local=cell.local or {})


def fingerprint(manifest: Manifest, cells: list[Cell]) -> Fingerprint:
    host = manifest.host
    return Fingerprint(
        gpu_names=sorted(g.name for g in host.gpus) if host.available else "unavailable",
        driver=host.driver,
        sglang_version=manifest.server.sglang_version,
        simulated=bool(manifest.simulated),
        setups={c.key: _setup(c) for c in cells},
    )


def differences(fa: Fingerprint, fb: Fingerprint) -> list[str]:
    """Human-readable fingerprint differences (setups only for cells both bundles have).

    Setups compare by setup digest when both cells carry one, else by plan digest (older bundles)."""
    out = []
    for attr, label in Fingerprint.LABELS.items():
        if getattr(fa, attr) != getattr(fb, attr):
            out.append(f"{label}: A={getattr(fa, attr)} B={getattr(fb, attr)}")
    sa, sb = fa.setups, fb.setups
    for cell in sorted(set(sa) & set(sb)):
        a, b = sa[cell], sb[cell]
        key = "setup_digest" if a.setup_digest and b.setup_digest else "plan_digest"
        if getattr(a, key) != getattr(b, key):
            out.append(f"{key.replace('_', ' ')} of {cell}: A={getattr(a, key)} B={getattr(b, key)}")
    return out


def local_differences(fa: Fingerprint, fb: Fingerprint) -> list[str]:
    """Host-local values (model path, host, port) that differ between the cells both bundles have."""
    out = []
    sa, sb = fa.setups, fb.setups
    for cell in sorted(set(sa) & set(sb)):
        la, lb = sa[cell].local, sb[cell].local
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                out.append(f"{key} of {cell}: A={la.get(key)} B={lb.get(key)}")
    return out


def local_summary(fa: Fingerprint, fb: Fingerprint) -> str:
    """The host-local differences in one line, each value pair once with the cells it holds for ("every cell"
    when all that both bundles have): two `make demo` runs differ in the port of every cell, which is one fact."""
    common = sorted(set(fa.setups) & set(fb.setups))
    groups: dict[tuple[str, str, str], list[str]] = {}
    for cell in common:
        la, lb = fa.setups[cell].local, fb.setups[cell].local
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                groups.setdefault((key, str(la.get(key)), str(lb.get(key))), []).append(cell)
    return "; ".join(f"{key} A={a} B={b} ({'every cell' if len(cells) == len(common) else ', '.join(cells)})"
                     for (key, a, b), cells in groups.items())


GATE_STATS = ("tokens", "mean_delta", "p99_delta", "max_delta", "max_flip_gap")  # a cell's statistics shown
GATE_SETTINGS = ("null_factor", "mean_delta", "max_delta", "p99_delta", "max_flip_gap", "min_tokens", "top_k",
                 "collapse_ratio", "min_accept", "min_exact_match")


@dataclass(frozen=True)
class GateSide:
    """One bundle's correctness verdict on a cell and its log-probability statistics (GATE_STATS)."""

    status: str | None
    exact_match_rate: float | None
    tokens: int | float | None
    mean_delta: float | None
    p99_delta: float | None
    max_delta: float | None
    max_flip_gap: float | None


@dataclass(frozen=True)
class GateRow:
    """A cell both bundles have: its verdict on A and on B."""

    profile: str
    spec: str
    a: GateSide
    b: GateSide
    same_verdict: bool


def _gate_of(cell: Cell) -> GateSide:
    corr = cell.correctness
    stats = (corr.model_extra or {}).get("logprobs")
    stats = stats if isinstance(stats, dict) else {}
    numbers = {k: stats.get(k) if isinstance(stats.get(k), int | float) else None for k in GATE_STATS}
    return GateSide(status=corr.status, exact_match_rate=corr.exact_match_rate, **numbers)


def matched(cells_a: list[Cell], cells_b: list[Cell]) -> list[tuple[Cell, Cell]]:
    """The cells both bundles have, in A's order: the same key (profile, spec, EAGLE-3 point)."""
    index_b = {c.key: c for c in cells_b}
    return [(ca, index_b[ca.key]) for ca in cells_a if ca.key in index_b]


def gate_rows(cells_a: list[Cell], cells_b: list[Cell]) -> list[GateRow]:
    """Each cell both bundles have: its correctness verdict and statistics on A and on B, and whether the
    verdicts agree. Information: a verdict that differs between hosts is reported, never refused."""
    out = []
    for ca, cb in matched(cells_a, cells_b):
        ga, gb = _gate_of(ca), _gate_of(cb)
        out.append(GateRow(profile=ca.profile, spec=ca.spec + bundle_names.point_text(ca.spec_params),
                           a=ga, b=gb, same_verdict=ga.status == gb.status))
    return out


def gate_setting_differences(ma: Manifest, mb: Manifest) -> list[str]:
    """The gate's settings that differ between the two bundles' manifests (their verdicts then differ in
    meaning too)."""
    a, b = ma.gate, mb.gate
    return [f"gate {k}: A={a.setting(k)} B={b.setting(k)}" for k in GATE_SETTINGS if a.setting(k) != b.setting(k)]


FDR = 0.05  # Benjamini-Hochberg's false discovery rate across the rows of one comparison
MIN_REPEATS = 2  # a side with fewer gives no spread, so no p-value
CSV = "csv"  # a DeltaRow field's metadata key: False for a field the CSV leaves out


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
    spec_params: dict[str, int] | None = field(default=None, metadata={CSV: False})
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
        return asdict(self)


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
                    spec_params=ca.spec_params.model_dump() if ca.spec_params else None,
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


def _fmt_gate(g: GateSide) -> str:
    em = "—" if g.exact_match_rate is None else f"{g.exact_match_rate:.0%}"
    mean, p99, mx = ("—" if v is None else f"{v:.4f}" for v in (g.mean_delta, g.p99_delta, g.max_delta))
    return (f"{g.status or '—'} (tokens {g.tokens if g.tokens is not None else '—'}, mean {mean}, p99 {p99}, "
            f"max {mx}, exact {em})")


def render_gate(rows: list[GateRow], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "A: verdict (log-probability statistics)", "B: verdict", "same verdict"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.profile, r.spec, _fmt_gate(r.a), _fmt_gate(r.b), "yes" if r.same_verdict else "NO")
    console.print(table)


def _fmt(v: float | None, sd: float | None = None) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if sd is None else f"{v:.2f} ± {sd:.2f}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def render(rows: list[DeltaRow], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "conc", "metric", "A (mean ± sd, n)", "B (mean ± sd, n)", "delta", "delta %",
                "p", "p (BH)", f"significant (FDR {FDR:.0%})"):
        table.add_column(col)
    for r in rows:
        verdict = "YES" if r.significant else "no"
        if r.note:
            verdict += f" — {r.note}"
        if r.load_note:
            verdict += f" — {r.load_note}"
        table.add_row(
            r.profile, r.spec, str(r.concurrency), r.metric,
            f"{_fmt(r.a, r.a_sd)}, {r.a_n}", f"{_fmt(r.b, r.b_sd)}, {r.b_n}",
            _fmt(r.delta), "—" if r.delta_pct is None else f"{r.delta_pct:+.1f}%",
            _fmt_p(r.p_value), _fmt_p(r.p_adjusted), verdict,
        )
    console.print(table)


CSV_FIELDS = tuple(f.name for f in fields(DeltaRow) if f.metadata.get(CSV, True))


def csv_text(rows: list[DeltaRow]) -> str:
    return tables.csv_text([r.to_json() for r in rows], CSV_FIELDS)


@dataclass(frozen=True, kw_only=True)
class CompareArgs(CliArgs):
    """The flags of `bench compare`: bundle A, bundle B (compared relative to A)."""

    prog: ClassVar[str] = "bench compare"
    description: ClassVar[str] = "Compare two bench bundles (B relative to A)."

    dir_a: str
    dir_b: str
    force: bool = False
    json: bool = False
    csv: bool = False

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("dir_a")
        parser.add_argument("dir_b")
        parser.add_argument("--force", action="store_true",
                            help="compare even when the host/version/setup fingerprints differ")
        out = parser.add_mutually_exclusive_group()
        out.add_argument("--json", action="store_true", help="print the deltas as JSON")
        out.add_argument("--csv", action="store_true", help="print the deltas as CSV (one row per delta)")
        return parser


def run_main(args: CompareArgs) -> int:
    return compare(dir_a=args.dir_a, dir_b=args.dir_b, force=args.force, as_json=args.json, as_csv=args.csv)


def compare(*, dir_a: str, dir_b: str, force: bool = False, as_json: bool = False, as_csv: bool = False) -> int:
    """Print B's deltas against A; UserError (exit 2) when the fingerprints differ and not `force`."""
    ma, ca = bundle.load(dir_a)
    mb, cb = bundle.load(dir_b)
    fa, fb = fingerprint(ma, ca), fingerprint(mb, cb)
    diffs = differences(fa, fb)
    local = local_differences(fa, fb)
    if diffs and not force:
        listing = "; ".join(diffs)
        raise UserError(f"the bundles are not comparable, fingerprints differ: {listing}; "
                        "rerun on matching hosts/versions/plans, or pass --force to compare anyway")
    sim = ma.simulated or mb.simulated
    label = "SIMULATED " if sim else ""
    if diffs and not as_csv:
        print(f"{label}WARNING: fingerprints differ (compared anyway because of --force):")
        for d in diffs:
            print(f"  - {d}")
    rows = deltas(ca, cb)
    if as_csv:
        if diffs:
            print(f"{label}WARNING: fingerprints differ (compared anyway because of --force): {'; '.join(diffs)}",
                  file=sys.stderr)
        sys.stdout.write(csv_text(rows))
        return 0
    gates, gate_settings = gate_rows(ca, cb), gate_setting_differences(ma, mb)
    if as_json:
        print(json.dumps({"differences": diffs, "local_differences": local, "simulated": bool(sim),
                          "rows": [r.to_json() for r in rows], "test": significance_summary(rows),
                          "gate": [asdict(g) for g in gates], "gate_settings": gate_settings},
                         indent=2, allow_nan=False))
        return 0
    if local:  # information, not a result: one line on stderr, so stdout is the comparison (--json has each cell)
        print(f"{label}host-local values differ, compared without them: {local_summary(fa, fb)}", file=sys.stderr)
    render(rows, Console(width=160), f"{label}B ({mb.run_id}) vs A ({ma.run_id})")
    loads = sorted({(r.profile, r.spec, r.concurrency, r.load_note) for r in rows if r.load_note})
    for profile, spec, level, note in loads:
        print(f"{label}WARNING: {profile}+{spec} at concurrency {level}: {note}")
    summary = significance_summary(rows)
    print(f"{label}p = Welch's t-test (two-sided) of B's mean against A's over their repeats; significant = "
          f"Benjamini-Hochberg at {FDR:.0%} false discovery rate across the {summary['rows_tested']} rows with a "
          f"p-value ({summary['rows_significant']} significant); a side with fewer than {MIN_REPEATS} repeats "
          "gives no p-value (never significant)")
    if summary["rows_tested"] and min(min(r.a_n, r.b_n) for r in rows if r.p_value is not None) < 3:
        print(f"{label}with 2 repeats on a side only large differences can be significant; more repeats "
              "(--repeats) find smaller ones")
    render_gate(gates, Console(width=160), f"{label}correctness gate, B vs A (information: reported, never refused)")
    for d in gate_settings:
        print(f"{label}  - {d}: the verdicts were reached under different thresholds")
    return 0


main = entry_point(CompareArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
