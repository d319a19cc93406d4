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
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import Console
from rich.table import Table

from bench.args import CliArgs, entry_point
from bench.bundle import names as bundle_names
from bench.bundle import store as bundle
from bench.bundle.schema import Cell
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


def _setup(cell: Cell) -> dict[str, Any]:
    return {"setup_digest": cell.setup_digest, "plan_digest": cell.plan_digest, "local": cell.local or {}}


def fingerprint(manifest: dict[str, Any], cells: list[Cell]) -> dict[str, Any]:
    host = manifest.get("host") or {}
    names = sorted(g.get("name", "") for g in host.get("gpus") or [])
    return {
        "GPU names": names if host.get("available") else "unavailable",
        "driver": host.get("driver"),
        "sglang version": (manifest.get("server") or {}).get("sglang_version"),
        "simulated": bool(manifest.get("simulated")),
        "setups": {c.key: _setup(c) for c in cells},
    }


def differences(fa: dict[str, Any], fb: dict[str, Any]) -> list[str]:
    """Human-readable fingerprint differences (setups only for cells both bundles have).

    Setups compare by setup digest when both cells carry one, else by plan digest (older bundles)."""
    out = []
    for key in ("GPU names", "driver", "sglang version", "simulated"):
        if fa[key] != fb[key]:
            out.append(f"{key}: A={fa[key]} B={fb[key]}")
    sa, sb = fa["setups"], fb["setups"]
    for cell in sorted(set(sa) & set(sb)):
        a, b = sa[cell], sb[cell]
        key = "setup_digest" if a["setup_digest"] and b["setup_digest"] else "plan_digest"
        if a[key] != b[key]:
            out.append(f"{key.replace('_', ' ')} of {cell}: A={a[key]} B={b[key]}")
    return out


def local_differences(fa: dict[str, Any], fb: dict[str, Any]) -> list[str]:
    """Host-local values (model path, host, port) that differ between the cells both bundles have."""
    out = []
    sa, sb = fa["setups"], fb["setups"]
    for cell in sorted(set(sa) & set(sb)):
        la, lb = sa[cell]["local"], sb[cell]["local"]
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                out.append(f"{key} of {cell}: A={la.get(key)} B={lb.get(key)}")
    return out


GATE_STATS = ("tokens", "mean_delta", "p99_delta", "max_delta", "max_flip_gap")  # a cell's statistics shown
GATE_SETTINGS = ("null_factor", "mean_delta", "max_delta", "p99_delta", "max_flip_gap", "min_tokens", "top_k",
                 "collapse_ratio", "min_accept", "min_exact_match")


def _gate_of(cell: Cell) -> dict[str, Any]:
    corr = cell.correctness
    stats = (corr.model_extra or {}).get("logprobs")
    stats = stats if isinstance(stats, dict) else {}
    return {"status": corr.status, "exact_match_rate": corr.exact_match_rate,
            **{k: stats.get(k) if isinstance(stats.get(k), int | float) else None for k in GATE_STATS}}


def matched(cells_a: list[Cell], cells_b: list[Cell]) -> list[tuple[Cell, Cell]]:
    """The cells both bundles have, in A's order: the same key (profile, spec, EAGLE-3 point)."""
    index_b = {c.key: c for c in cells_b}
    return [(ca, index_b[ca.key]) for ca in cells_a if ca.key in index_b]


def gate_rows(cells_a: list[Cell], cells_b: list[Cell]) -> list[dict[str, Any]]:
    """Each cell both bundles have: its correctness verdict and statistics on A and on B, and whether the
    verdicts agree. Information: a verdict that differs between hosts is reported, never refused."""
    out = []
    for ca, cb in matched(cells_a, cells_b):
        ga, gb = _gate_of(ca), _gate_of(cb)
        out.append({"profile": ca.profile, "spec": ca.spec + bundle_names.point_text(ca.spec_params),
                    "a": ga, "b": gb, "same_verdict": ga["status"] == gb["status"]})
    return out


def gate_setting_differences(ma: dict[str, Any], mb: dict[str, Any]) -> list[str]:
    """The gate's settings that differ between the two bundles' manifests (their verdicts then differ in
    meaning too)."""
    a, b = ma.get("gate") or {}, mb.get("gate") or {}
    return [f"gate {k}: A={a.get(k)} B={b.get(k)}" for k in GATE_SETTINGS if a.get(k) != b.get(k)]


FDR = 0.05  # Benjamini-Hochberg's false discovery rate across the rows of one comparison
MIN_REPEATS = 2  # a side with fewer gives no spread, so no p-value


def _level_stats(cell: Cell, level: str, key: str) -> tuple[float | None, float | None, int]:
    agg = cell.level(level)
    if not cell.valid:
        return None, None, 0
    return agg.get(f"{key}_mean"), agg.get(f"{key}_sd"), int(agg.get("repeats_valid") or 0)


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


def deltas(cells_a: list[Cell], cells_b: list[Cell], fdr: float = FDR) -> list[dict[str, Any]]:
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
                row: dict[str, Any] = {
                    "profile": ca.profile, "spec": ca.spec + bundle_names.point_text(ca.spec_params),
                    "spec_params": ca.spec_params.model_dump() if ca.spec_params else None,
                    "concurrency": int(level), "metric": label,
                    "a": ma, "a_sd": sa, "a_n": na, "b": mb, "b_sd": sb, "b_n": nb, "delta": None, "delta_pct": None,
                    "t": None, "df": None, "p_value": None, "p_adjusted": None, "significant": False, "note": None,
                    "load_note": load_note(ca, cb, int(level)),
                }
                if not ca.valid or not cb.valid:
                    row["note"] = "invalid in " + ("A" if not ca.valid else "B")
                elif ma is None or mb is None:
                    row["note"] = "not measured"
                else:
                    row["delta"] = _finite(mb - ma)
                    row["delta_pct"] = _finite((mb - ma) / ma * 100.0) if ma else None
                    if row["delta"] is None:
                        row["note"] = "out of range (numbers too large to compare)"
                    elif na < MIN_REPEATS or nb < MIN_REPEATS:
                        row["note"] = _few_repeats(na, nb)
                    else:
                        test = welch(ma, sa or 0.0, na, mb, sb or 0.0, nb)
                        if test is None:
                            row["note"] = "out of range (numbers too large to compare)"
                        else:
                            row.update(t=test.t, df=test.df, p_value=test.p)
                            if test.t is None:
                                row["note"] = "no spread on either side"
                out.append(row)
    significant, adjusted = benjamini_hochberg([r["p_value"] for r in out], fdr)
    for row, sig, adj in zip(out, significant, adjusted, strict=True):
        row["p_adjusted"], row["significant"] = adj, sig
    return out


def significance_summary(rows: list[dict[str, Any]], fdr: float = FDR) -> dict[str, Any]:
    """What the comparison's test was and how many rows it decided."""
    return {"test": "Welch's t-test (two-sided), Benjamini-Hochberg across rows", "fdr": fdr,
            "min_repeats": MIN_REPEATS, "rows": len(rows),
            "rows_tested": sum(r["p_value"] is not None for r in rows),
            "rows_significant": sum(bool(r["significant"]) for r in rows)}


def _finite(v: float) -> float | None:
    """Differences of huge finite numbers can overflow; JSON output never carries NaN or Infinity."""
    return float(v) if math.isfinite(v) else None


def _fmt_gate(g: dict[str, Any]) -> str:
    em = "—" if g["exact_match_rate"] is None else f"{g['exact_match_rate']:.0%}"
    mean, p99, mx = ("—" if g[k] is None else f"{g[k]:.4f}" for k in ("mean_delta", "p99_delta", "max_delta"))
    return (f"{g['status'] or '—'} (tokens {g['tokens'] if g['tokens'] is not None else '—'}, mean {mean}, p99 {p99}, "
            f"max {mx}, exact {em})")


def render_gate(rows: list[dict[str, Any]], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "A: verdict (log-probability statistics)", "B: verdict", "same verdict"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["profile"], r["spec"], _fmt_gate(r["a"]), _fmt_gate(r["b"]), "yes" if r["same_verdict"] else "NO")
    console.print(table)


def _fmt(v: float | None, sd: float | None = None) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if sd is None else f"{v:.2f} ± {sd:.2f}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def render(rows: list[dict[str, Any]], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "conc", "metric", "A (mean ± sd, n)", "B (mean ± sd, n)", "delta", "delta %",
                "p", "p (BH)", f"significant (FDR {FDR:.0%})"):
        table.add_column(col)
    for r in rows:
        verdict = "YES" if r["significant"] else "no"
        if r["note"]:
            verdict += f" — {r['note']}"
        if r.get("load_note"):
            verdict += f" — {r['load_note']}"
        table.add_row(
            r["profile"], r["spec"], str(r["concurrency"]), r["metric"],
            f"{_fmt(r['a'], r['a_sd'])}, {r['a_n']}", f"{_fmt(r['b'], r['b_sd'])}, {r['b_n']}",
            _fmt(r["delta"]), "—" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%",
            _fmt_p(r["p_value"]), _fmt_p(r["p_adjusted"]), verdict,
        )
    console.print(table)


CSV_FIELDS = ("profile", "spec", "concurrency", "metric", "a", "a_sd", "a_n", "b", "b_sd", "b_n", "delta", "delta_pct",
              "t", "df", "p_value", "p_adjusted", "significant", "note", "load_note")


def csv_text(rows: list[dict[str, Any]]) -> str:
    return tables.csv_text(rows, CSV_FIELDS)


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
    sim = ma.get("simulated") or mb.get("simulated")
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
        print(json.dumps({"differences": diffs, "local_differences": local, "simulated": bool(sim), "rows": rows,
                          "test": significance_summary(rows), "gate": gates, "gate_settings": gate_settings},
                         indent=2, allow_nan=False))
        return 0
    if local:
        print(f"{label}local to each host, shown for information (setups are compared without them):")
        for d in local:
            print(f"  - {d}")
    render(rows, Console(width=160), f"{label}B ({mb.get('run_id')}) vs A ({ma.get('run_id')})")
    loads = sorted({(r["profile"], r["spec"], r["concurrency"], r["load_note"]) for r in rows if r.get("load_note")})
    for profile, spec, level, note in loads:
        print(f"{label}WARNING: {profile}+{spec} at concurrency {level}: {note}")
    summary = significance_summary(rows)
    print(f"{label}p = Welch's t-test (two-sided) of B's mean against A's over their repeats; significant = "
          f"Benjamini-Hochberg at {FDR:.0%} false discovery rate across the {summary['rows_tested']} rows with a "
          f"p-value ({summary['rows_significant']} significant); a side with fewer than {MIN_REPEATS} repeats "
          "gives no p-value (never significant)")
    if summary["rows_tested"] and min(min(r["a_n"], r["b_n"]) for r in rows if r["p_value"] is not None) < 3:
        print(f"{label}with 2 repeats on a side only large differences can be significant; more repeats "
              "(--repeats) find smaller ones")
    render_gate(gates, Console(width=160), f"{label}correctness gate, B vs A (information: reported, never refused)")
    for d in gate_settings:
        print(f"{label}  - {d}: the verdicts were reached under different thresholds")
    return 0


main = entry_point(CompareArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
