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

Whether the bundles are comparable: bench/report/fingerprints.py; the rows and their test:
bench/report/deltas.py; the gate on both sides: bench/report/gate_sides.py; how they are shown:
bench/report/compare_render.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import ClassVar

from rich.console import Console

from bench.args import CliArgs, entry_point
from bench.bundle import store as bundle
from bench.report.compare_render import csv_text, render, render_gate
from bench.report.deltas import FDR, MIN_REPEATS, deltas, significance_summary
from bench.report.fingerprints import differences, fingerprint, local_differences, local_summary
from bench.report.gate_sides import gate_rows, gate_setting_differences
from launcher.errors import UserError


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
