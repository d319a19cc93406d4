"""`bench compare DIR_A DIR_B [--force]`: per-(profile, spec) deltas, and whether they are real.

A delta counts as beyond run-to-run noise when |B - A| > 2 * sqrt(sdA² + sdB²), sd being the
sample standard deviation over repeats; with a single repeat on either side the spread is unknown.
Two bundles are only comparable when their fingerprints agree: GPU names, driver, SGLang version,
simulated or not, and the plan digest of every (profile, spec) both measured. Otherwise the
command refuses (exit 2) and lists the differences; --force prints them and compares anyway.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import bundle
from bench.stats import spread_exceeded
from launcher.errors import UserError, run_cli

METRICS = (
    ("tok/s", "output_throughput"),
    ("TPOT ms", "mean_tpot_ms"),
    ("TTFT ms", "mean_ttft_ms"),
    ("accept length", "accept_length"),
)


def fingerprint(manifest: dict[str, Any], cells: list[dict[str, Any]]) -> dict[str, Any]:
    host = manifest.get("host") or {}
    names = sorted(g.get("name", "") for g in host.get("gpus") or [])
    return {
        "GPU names": names if host.get("available") else "unavailable",
        "driver": host.get("driver"),
        "sglang version": (manifest.get("server") or {}).get("sglang_version"),
        "simulated": bool(manifest.get("simulated")),
        "plan digests": {bundle.cell_name(c["profile"], c["spec"]): c.get("plan_digest") for c in cells},
    }


def differences(fa: dict[str, Any], fb: dict[str, Any]) -> list[str]:
    """Human-readable fingerprint differences (plan digests only for cells both bundles have)."""
    out = []
    for key in ("GPU names", "driver", "sglang version", "simulated"):
        if fa[key] != fb[key]:
            out.append(f"{key}: A={fa[key]} B={fb[key]}")
    da, db = fa["plan digests"], fb["plan digests"]
    for cell in sorted(set(da) & set(db)):
        if da[cell] != db[cell]:
            out.append(f"plan digest of {cell}: A={da[cell]} B={db[cell]}")
    return out


def _level_stats(cell: dict[str, Any], level: str, key: str) -> tuple[float | None, float | None, int]:
    agg = (cell.get("by_concurrency") or {}).get(level) or {}
    if not cell.get("valid"):
        return None, None, 0
    return agg.get(f"{key}_mean"), agg.get(f"{key}_sd"), int(agg.get("repeats_valid") or 0)


def deltas(cells_a: list[dict[str, Any]], cells_b: list[dict[str, Any]], k: float = 2.0) -> list[dict[str, Any]]:
    """One entry per (profile, spec, concurrency, metric) present in both bundles."""
    index_b = {(c["profile"], c["spec"]): c for c in cells_b}
    out = []
    for ca in cells_a:
        cb = index_b.get((ca["profile"], ca["spec"]))
        if cb is None:
            continue
        levels = [lv for lv in (ca.get("by_concurrency") or {}) if lv in (cb.get("by_concurrency") or {})]
        for level in levels:
            for label, key in METRICS:
                ma, sa, na = _level_stats(ca, level, key)
                mb, sb, nb = _level_stats(cb, level, key)
                row: dict[str, Any] = {
                    "profile": ca["profile"], "spec": ca["spec"], "concurrency": int(level), "metric": label,
                    "a": ma, "a_sd": sa, "b": mb, "b_sd": sb, "delta": None, "delta_pct": None, "beyond_spread": None,
                    "note": None,
                }
                if not ca.get("valid") or not cb.get("valid"):
                    row["note"] = "invalid in " + ("A" if not ca.get("valid") else "B")
                elif ma is None or mb is None:
                    row["note"] = "not measured"
                else:
                    row["delta"] = mb - ma
                    row["delta_pct"] = (mb - ma) / ma * 100.0 if ma else None
                    row["combined_sd"] = math.sqrt((sa or 0.0) ** 2 + (sb or 0.0) ** 2)
                    if na < 2 or nb < 2:
                        row["note"] = "spread unknown (fewer than 2 repeats)"
                    else:
                        row["beyond_spread"] = spread_exceeded(row["delta"], sa, sb, k)
                out.append(row)
    return out


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench compare", description="Compare two bench bundles (B relative to A).")
    p.add_argument("dir_a")
    p.add_argument("dir_b")
    p.add_argument("--force", action="store_true", help="compare even when the host/version/plan fingerprints differ")
    p.add_argument("--json", action="store_true", help="print the deltas as JSON")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    console = Console(width=160)

    def body() -> int:
        ma, ca = bundle.load(args.dir_a)
        mb, cb = bundle.load(args.dir_b)
        diffs = differences(fingerprint(ma, ca), fingerprint(mb, cb))
        if diffs and not args.force:
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
        if args.json:
            print(json.dumps({"differences": diffs, "simulated": bool(sim), "rows": rows}, indent=2))
        else:
            render(rows, console, f"{label}B ({mb.get('run_id')}) vs A ({ma.get('run_id')})")
            print(f"{label}beyond spread = |delta| > 2·sqrt(sdA² + sdB²) over repeats")
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
