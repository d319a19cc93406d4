"""`bench compare DIR_A DIR_B [--force]`: per-(profile, spec) deltas, and whether they are real.

A delta counts as beyond run-to-run noise when |B - A| > 2 * sqrt(sdA² + sdB²), sd being the
sample standard deviation over repeats; with a single repeat on either side the spread is unknown.
Two bundles are only comparable when their fingerprints agree: GPU names, driver, SGLang version,
simulated or not, and the setup of every (profile, spec) both measured (its setup digest: env,
flags, patches and the models' identity, without the model paths, host and port; the plan digest
for a bundle written before setup digests existed). Otherwise the command refuses (exit 2) and
lists the differences; --force prints them and compares anyway. Host-local values that differ
(model path, port, ...) are listed as information, never refused, and so is the correctness gate: each
cell's verdict and statistics on both hosts (bench/run/logprob_gate.py), and the thresholds where the two
bundles were gated differently.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import Console
from rich.table import Table

from bench import bundle, bundle_names
from bench.args import CliArgs, entry_point
from bench.bundle_schema import Cell
from bench.stats import spread_exceeded
from launcher.errors import UserError

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


GATE_STATS = ("tokens", "p99_delta", "max_delta", "max_flip_gap")  # a cell's log-probability statistics shown
GATE_SETTINGS = ("max_delta", "p99_delta", "max_flip_gap", "min_tokens", "top_k", "collapse_ratio", "min_accept",
                 "min_exact_match")


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


def _level_stats(cell: Cell, level: str, key: str) -> tuple[float | None, float | None, int]:
    agg = cell.level(level)
    if not cell.valid:
        return None, None, 0
    return agg.get(f"{key}_mean"), agg.get(f"{key}_sd"), int(agg.get("repeats_valid") or 0)


def deltas(cells_a: list[Cell], cells_b: list[Cell], k: float = 2.0) -> list[dict[str, Any]]:
    """One entry per (profile, spec, EAGLE-3 point, concurrency, metric) present in both bundles: cells
    match by (profile, spec, spec_params), a cell without a point (older bundles too) only one without."""
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
                    "a": ma, "a_sd": sa, "b": mb, "b_sd": sb, "delta": None, "delta_pct": None, "beyond_spread": None,
                    "note": None,
                }
                if not ca.valid or not cb.valid:
                    row["note"] = "invalid in " + ("A" if not ca.valid else "B")
                elif ma is None or mb is None:
                    row["note"] = "not measured"
                else:
                    row["delta"] = _finite(mb - ma)
                    row["delta_pct"] = _finite((mb - ma) / ma * 100.0) if ma else None
                    row["combined_sd"] = _finite(math.hypot(sa or 0.0, sb or 0.0))
                    if row["delta"] is None or row["combined_sd"] is None:
                        row["note"] = "out of range (numbers too large to compare)"
                    elif na < 2 or nb < 2:
                        row["note"] = "spread unknown (fewer than 2 repeats)"
                    else:
                        row["beyond_spread"] = spread_exceeded(row["delta"], sa, sb, k)
                out.append(row)
    return out


def _finite(v: float) -> float | None:
    """Differences of huge finite numbers can overflow; JSON output never carries NaN or Infinity."""
    return float(v) if math.isfinite(v) else None


def _fmt_gate(g: dict[str, Any]) -> str:
    em = "—" if g["exact_match_rate"] is None else f"{g['exact_match_rate']:.0%}"
    p99 = "—" if g["p99_delta"] is None else f"{g['p99_delta']:.4f}"
    mx = "—" if g["max_delta"] is None else f"{g['max_delta']:.4f}"
    return f"{g['status'] or '—'} (tokens {g['tokens'] if g['tokens'] is not None else '—'}, p99 {p99}, max {mx}, exact {em})"


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


def render(rows: list[dict[str, Any]], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("profile", "spec", "conc", "metric", "A (mean ± sd)", "B (mean ± sd)", "delta", "delta %", "beyond 2σ spread"):
        table.add_column(col)
    for r in rows:
        verdict = r["note"] if r["beyond_spread"] is None else ("YES" if r["beyond_spread"] else "no")
        table.add_row(
            r["profile"], r["spec"], str(r["concurrency"]), r["metric"], _fmt(r["a"], r["a_sd"]), _fmt(r["b"], r["b_sd"]),
            _fmt(r["delta"]), "—" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%", verdict or "—",
        )
    console.print(table)


@dataclass(frozen=True, kw_only=True)
class CompareArgs(CliArgs):
    """The flags of `bench compare`: bundle A, bundle B (compared relative to A)."""

    prog: ClassVar[str] = "bench compare"
    description: ClassVar[str] = "Compare two bench bundles (B relative to A)."

    dir_a: str
    dir_b: str
    force: bool = False
    json: bool = False

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("dir_a")
        parser.add_argument("dir_b")
        parser.add_argument("--force", action="store_true",
                            help="compare even when the host/version/setup fingerprints differ")
        parser.add_argument("--json", action="store_true", help="print the deltas as JSON")
        return parser


def run_main(args: CompareArgs) -> int:
    return compare(dir_a=args.dir_a, dir_b=args.dir_b, force=args.force, as_json=args.json)


def compare(*, dir_a: str, dir_b: str, force: bool = False, as_json: bool = False) -> int:
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
    if diffs:
        print(f"{label}WARNING: fingerprints differ (compared anyway because of --force):")
        for d in diffs:
            print(f"  - {d}")
    rows = deltas(ca, cb)
    gates, gate_settings = gate_rows(ca, cb), gate_setting_differences(ma, mb)
    if as_json:
        print(json.dumps({"differences": diffs, "local_differences": local, "simulated": bool(sim), "rows": rows,
                          "gate": gates, "gate_settings": gate_settings}, indent=2, allow_nan=False))
        return 0
    if local:
        print(f"{label}local to each host, shown for information (setups are compared without them):")
        for d in local:
            print(f"  - {d}")
    render(rows, Console(width=160), f"{label}B ({mb.get('run_id')}) vs A ({ma.get('run_id')})")
    print(f"{label}beyond spread = |delta| > 2·sqrt(sdA² + sdB²) over repeats")
    render_gate(gates, Console(width=160), f"{label}correctness gate, B vs A (information: reported, never refused)")
    for d in gate_settings:
        print(f"{label}  - {d}: the verdicts were reached under different thresholds")
    return 0


main = entry_point(CompareArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
