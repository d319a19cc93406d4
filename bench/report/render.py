"""`bench report DIR`: rebuild summary.csv, summary.md and the plots from a bundle's JSON files.

The summaries are a pure function of manifest.json, the result files and the request files, so
`bench run` and `bench report` write byte-identical summary.md for the same bundle. The p50/p90/p99
of TTFT and TPOT come from the request files (bundle_aggregate.request_percentiles: every request of
the valid repeats of a level, pooled); a bundle whose request rows lack them shows '—' there. Cells that
carry acceptance by draft position add a section to summary.md and rows to acceptance.csv
(bench/report/acceptance_table.py).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bench.args import CliArgs, entry_point
from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import store as bundle
from bench.bundle.schema import ADAPTIVE_ACCEPT, TEXTS_DIFFER, Cell, Manifest
from bench.report import acceptance_table, energy_table, load_rows, tables
from bench.report.load_rows import LoadPoint
from bench.report.stats import fmt_mean_sd
from bench.report.summary_rows import CSV_FIELDS, SummaryRow, latency_curves, rows
from launcher import atomic

SIM_BANNER = (
    "> **SIMULATED**: measured against the stand-in server (a test double with configured timings), "
    "not a real engine on a GPU. The numbers show that the harness works; they say nothing about any host."
)
MAX_REASON = 160  # the full reason is in <profile>__<spec>.json


def _num(v: Any, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def pooled_text(r: SummaryRow, name: str, digits: int) -> str:
    """`p50 / p90 / p99` of one metric in a row ('—' for each the bundle cannot give)."""
    values = [r.pooled(bundle_aggregate.pooled_key(name, q)) for q in bundle_aggregate.POOLED_PERCENTILES]
    return "—" if all(v is None for v in values) else " / ".join(_num(v, digits) for v in values)


def latency_plot_note(manifest: Manifest, table: list[SummaryRow]) -> str:
    """What the summary says of throughput_latency.png: what it shows, or why there is none."""
    if len(manifest.levels) < 2:
        return ("No throughput_latency.png: the bundle has one concurrency level (it takes two or more "
                "`--concurrency` levels).")
    if not latency_curves(table):
        return "No throughput_latency.png: no valid cell has a median TPOT at any concurrency level."
    return ("throughput_latency.png: output tok/s (mean over repeats) against median TPOT per request (p50), "
            "one line per cell, one point per concurrency level.")


def _host_line(manifest: Manifest) -> str:
    host = manifest.host
    if not host.available:
        return f"unavailable ({host.reason or 'no nvidia-smi'})"
    names: dict[str, int] = {}
    for g in host.gpus:
        names[g.name] = names.get(g.name, 0) + 1
    gpus = ", ".join(f"{n}x {name}" for name, n in names.items())
    link = f", {host.interconnect}" if host.interconnect else ""
    return f"{gpus}{link}; driver {host.driver}, NCCL {host.nccl or 'unknown'}"


def correctness_text(r: SummaryRow) -> str:
    status = r.correctness or "—"
    if status in ("FAIL", "not enough evidence") and r.correctness_reasons:
        return f"{status}: " + "; ".join(r.correctness_reasons)
    return status


def gate_lines(manifest: Manifest) -> list[str]:
    """How the bundle's gate judged, in the words of its own settings (a bundle gated on exact match says so)."""
    gate = manifest.gate
    min_accept = 1.05 if gate.min_accept is None else gate.min_accept
    accept = f"accept length under {gate.collapse_ratio:.0%} of baseline's or at most {min_accept}"
    if gate.max_delta is None and gate.null_factor is None:
        # a bundle gated on exact match, by a kit before the log-probability gate: its summary as it was written
        return [f"- correctness: greedy outputs vs baseline under the same spec; FAIL below "
                f"{0.9 if gate.min_exact_match is None else gate.min_exact_match:.0%} exact match, or {accept}. A FAIL profile is not "
                "a candidate, whatever its speed."]
    if gate.null_factor is not None:
        fixed = [f"{k} {gate.setting(k)}" for k in ("mean_delta", "p99_delta", "max_flip_gap", "max_delta")
                 if gate.setting(k)]
        return [
            "- correctness: each profile's untimed greedy pass vs baseline's under the same spec, at concurrency 1 "
            "and the highest level, by log-probability: FAIL when, before a prompt's first divergence, the mean or "
            "p99 change of the chosen token's log-probability is above the calibrated floor plus "
            f"{gate.null_factor:g}x what baseline shows against itself at two batch sizes (the null), when texts "
            f"parted at no near-tie, or on {accept} at the same EAGLE-3 point"
            + (f"; limits set: {', '.join(fixed)}" if fixed else "")
            + f"; 'not enough evidence' under {gate.min_tokens} tokens compared or without log-probabilities "
            "from the server (never a pass). A FAIL profile is not a candidate, whatever its speed.",
            f"- exact match and first divergence are information only: {TEXTS_DIFFER}.",
            f"- {ADAPTIVE_ACCEPT}.",
        ]
    return [
        "- correctness: each profile's untimed greedy pass vs baseline's under the same spec, by log-probability: "
        f"FAIL when, before a prompt's first divergence, a chosen token's log-probability moved by more than "
        f"{gate.max_delta} nats (p99 over {gate.p99_delta}), when texts parted at tokens more than "
        f"{gate.max_flip_gap} nats apart, or on {accept}; 'not enough evidence' under {gate.min_tokens} "
        "tokens compared or without log-probabilities from the server (never a pass). A FAIL profile is not a "
        "candidate, whatever its speed.",
        f"- exact match and first divergence are information only: {TEXTS_DIFFER}.",
        f"- {ADAPTIVE_ACCEPT}.",
    ]


def markdown(manifest: Manifest, cells: list[Cell], run_dir: str | Path | None = None) -> str:
    """summary.md; with `run_dir`, the TTFT/TPOT percentiles from its request files."""
    return _markdown(manifest, rows(manifest, cells, run_dir), cells, load_rows.points(cells, run_dir))


def _markdown(manifest: Manifest, table: list[SummaryRow], cells: list[Cell], loads: list[LoadPoint]) -> str:
    sim = bool(manifest.simulated)
    lines = _header_lines(manifest)
    lines += [
        "| profile | spec | conc | status | tok/s (mean ± sd) | speedup vs baseline+off | TTFT ms "
        "| TTFT p50/p90/p99 ms | TPOT ms | TPOT p50/p90/p99 ms | chunk gap ms | accept length | exact match "
        "| correctness |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [_table_line(r) for r in table]
    if not table:
        lines.append("| (no closed-loop level: the open-loop levels are in the load section below) |")
    lines += acceptance_table.markdown_lines(cells)
    lines += load_rows.markdown_lines(manifest, cells, loads)
    lines += energy_table.markdown_lines(manifest, cells)
    lines += _reading_lines(manifest, table)
    if sim:
        lines += ["", "SIMULATED: every number above comes from the stand-in server."]
    return "\n".join(lines) + "\n"


def _header_lines(manifest: Manifest) -> list[str]:
    """summary.md's title, its SIMULATED and INCOMPLETE banners, and what was measured where, with what."""
    s = manifest.settings
    sim = bool(manifest.simulated)
    title = f"# {'SIMULATED ' if sim else ''}Bench summary: run {manifest.run_id}"
    if s.fleet_host:
        title += f", fleet host {s.fleet_host}"
    lines = [title, ""]
    if sim:
        lines += [SIM_BANNER, ""]
    if not manifest.complete:
        why = "interrupted" if manifest.interrupted else "stopped early"
        lines += [f"**INCOMPLETE** ({why}): only the cells below were measured.", ""]
    kit, server = manifest.kit, manifest.server
    return lines + [
        f"- Host: {_host_line(manifest)}",
        f"- SGLang: {server.sglang_version or 'unknown'} at {server.url}",
        f"- Kit: {kit.version or 'unknown'} (git {(kit.git_sha or 'unknown')[:12]})"
        + (f", image {kit.image_id}" if kit.image_id else ""),
        f"- Workload: {s.workload} ({s.num_prompts} prompts), API {s.api}, "
        f"max_tokens {s.max_tokens}, ignore_eos {s.ignore_eos}, temperature {s.temperature or 0} (timed; the correctness pass at 0); "
        f"{s.warmup} warm-up requests after each switch (not counted); {s.repeats} repeats at {_loads_text(manifest)}",
        "",
    ]


def _loads_text(manifest: Manifest) -> str:
    """The loads the run measured: its concurrency levels, its open-loop rates, or the SLA search's."""
    s, extra = manifest.settings, manifest.settings.model_extra or {}
    parts = [f"concurrency {', '.join(str(c) for c in s.concurrency)}"] if s.concurrency else []
    rates = extra.get("request_rate")
    if isinstance(rates, list) and rates:
        parts.append(f"request rates {', '.join(f'{r:g}' for r in rates)} req/s (open loop, burstiness "
                     f"{extra.get('burstiness', 1)})")
    if "ttft_p99_ms" in extra:
        parts.append("the open-loop rates the SLA search chose (sla.json; the load section below)")
    return " and ".join(parts) or "no load recorded"


def _table_line(r: SummaryRow) -> str:
    """One row of summary.md's table: an invalid one gives its reason (cut at MAX_REASON) and no number."""
    if not r.valid:
        reason = str(r.invalid_reason).replace("|", "/")
        reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
        return (f"| {r.profile} | {r.spec} | {r.concurrency} | INVALID | invalid: {reason} "
                f"| — | — | — | — | — | — | — | — | {correctness_text(r)} |")
    speed = "—" if r.speedup_vs_baseline_off is None else f"{r.speedup_vs_baseline_off:.2f}x"
    accept = fmt_mean_sd(r.accept_length_mean, r.accept_length_sd, 2) if r.accept_length_mean else "—"
    if r.accept_length_source == "metrics":
        accept += " (metrics)"
    exact = "—" if r.exact_match_rate is None else f"{r.exact_match_rate:.0%}"
    return (
        f"| {r.profile} | {r.spec} | {r.concurrency} | {r.status} "
        f"| {fmt_mean_sd(r.output_throughput_mean, r.output_throughput_sd)} | {speed} "
        f"| {fmt_mean_sd(r.mean_ttft_ms_mean, r.mean_ttft_ms_sd)} | {pooled_text(r, 'ttft', 1)} "
        f"| {fmt_mean_sd(r.mean_tpot_ms_mean, r.mean_tpot_ms_sd, 2)} | {pooled_text(r, 'tpot', 2)} "
        f"| {fmt_mean_sd(r.mean_itl_ms_mean, r.mean_itl_ms_sd, 2)} | {accept} | {exact} "
        f"| {correctness_text(r)} |"
    )


def _reading_lines(manifest: Manifest, table: list[SummaryRow]) -> list[str]:
    """How to read summary.md: what each column means, how the bundle's gate judged, what the plots show."""
    return [
        "",
        "How to read it:",
        "- tok/s: output tokens of all requests of a repeat / its wall time; mean ± sample sd over repeats.",
        "- TTFT, TPOT, chunk gap: per-repeat means, then mean ± sd over repeats. TPOT = (e2e - TTFT) / "
        "(tokens - 1). Chunk gap is the raw time between streamed chunks: under speculation one chunk is "
        "one verify pass.",
        "- TTFT, TPOT p50/p90/p99: percentiles of the per-request values of all valid repeats at that "
        "concurrency, pooled (linear interpolation between closest ranks, as numpy); '—' when the request "
        "files do not hold them.",
        "- accept length: completion_tokens / spec_verify_ct summed over the requests of a repeat "
        "(per-request meta_info); '(metrics)' when it came from /metrics counter deltas instead.",
        *gate_lines(manifest),
        "- INVALID: a request failed, a stream broke or the server restarted; no number is reported.",
        "",
        "Plots: throughput.png (tok/s, error bars = sd over repeats), tpot.png (per-request TPOT).",
        latency_plot_note(manifest, table),
    ]


def csv_text(manifest: Manifest, cells: list[Cell], run_dir: str | Path | None = None) -> str:
    """summary.csv; with `run_dir`, the TTFT/TPOT percentiles from its request files."""
    return _csv(rows(manifest, cells, run_dir))


def _csv(table: list[SummaryRow]) -> str:
    return tables.csv_text([r.csv_values() for r in table], CSV_FIELDS)


def build(run_dir: str | Path) -> list[Path]:
    """Write summary.csv, summary.md (acceptance.csv when a cell has acceptance) and the PNG plots of one bundle;
    returns the paths."""
    from bench.report import load_plots, plots

    d = Path(run_dir)
    manifest, cells = bundle.load(d)
    table, loads = rows(manifest, cells, d), load_rows.points(cells, d)
    written = [
        atomic.write_text(d / "summary.csv", _csv(table)),
        atomic.write_text(d / "summary.md", _markdown(manifest, table, cells, loads)),
    ]
    if load_rows.several_loads(manifest, cells):
        written.append(atomic.write_text(d / load_rows.CSV_FILE, load_rows.csv_text(loads)))
        written += load_plots.write_all(d, loads, bool(manifest.simulated), load_rows.sla_targets(manifest))
    energy = energy_table.csv_text(manifest, cells)
    if energy is not None:
        written.append(atomic.write_text(d / energy_table.CSV_FILE, energy))
    accepted = acceptance_table.csv_text(cells)
    if accepted is not None:
        written.append(atomic.write_text(d / acceptance_table.CSV_FILE, accepted))
    written += plots.write_all(d, manifest, cells, table)
    return written


@dataclass(frozen=True, kw_only=True)
class ReportArgs(CliArgs):
    """The one argument of `bench report`: the bundle folder."""

    prog: ClassVar[str] = "bench report"
    description: ClassVar[str] = "Rebuild summary.csv, summary.md and plots of a bundle."

    dir: str

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("dir", help="a bundle folder written by `bench run` (OUT/<run-id>)")
        return parser


def run_main(args: ReportArgs) -> int:
    """Rebuild, then name every file written (SIMULATED bundles say so)."""
    paths = build(args.dir)
    manifest, _ = bundle.load(args.dir)
    label = "SIMULATED " if manifest.simulated else ""
    for path in paths:
        print(f"{label}wrote {path}")
    return 0


main = entry_point(ReportArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
