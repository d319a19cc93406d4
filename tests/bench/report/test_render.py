"""bench.report.render: the markdown summary marks simulated runs, invalid cells and failed correctness gates."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers_bench import cell, manifest

from bench.bundle.schema import Cell, Manifest
from bench.report import render as report


def test_markdown_marks_invalid_and_fail_and_simulated():
    cells = [cell("baseline", "off", 80.0, 1.0), cell("fused", "eagle3", 120.0, 1.0), cell("ep", "eagle3", 0, 0, valid=False)]
    cells[1]["correctness"] = {"status": "FAIL", "reasons": ["exact match 0% < 90% of baseline+eagle3"]}
    md = report.markdown(Manifest.model_validate({**manifest(), "simulated": True}), [Cell.model_validate(c) for c in cells])
    assert md.startswith("# SIMULATED Bench summary")
    fused = next(line for line in md.splitlines() if line.startswith("| fused"))
    assert "| FAIL |" in fused and "1.50x" in fused and "FAIL: exact match" in fused
    ep = next(line for line in md.splitlines() if line.startswith("| ep"))
    assert "INVALID" in ep and "0.0" not in ep


def test_markdown_of_a_real_run_is_not_marked_simulated():
    md = report.markdown(Manifest.model_validate(manifest()), [Cell.model_validate(cell("baseline", "off", 80.0, 1.0))])
    assert "SIMULATED" not in md.splitlines()[0]


def test_a_cell_without_enough_evidence_is_not_shown_as_ok():
    cells = [cell("baseline", "off", 80.0, 1.0), cell("quiet", "off", 90.0, 1.0)]
    cells[1]["correctness"] = {"status": "not enough evidence",
                               "reasons": ["the server returned no log-probabilities for this profile's correctness pass"]}
    md = report.markdown(Manifest.model_validate(manifest()), [Cell.model_validate(c) for c in cells])
    quiet = next(line for line in md.splitlines() if line.startswith("| quiet"))
    assert "| UNVERIFIED |" in quiet and "| OK |" not in quiet
    assert "not enough evidence: the server returned no log-probabilities" in quiet
    base = next(line for line in md.splitlines() if line.startswith("| baseline"))
    assert "| OK |" in base


# ----- TTFT/TPOT p50/p90/p99 and the throughput-latency plot --------------------------------------
def _bundle(run_dir, levels, rows_of, *, old=False):
    """A bundle of baseline+off and fused+eagle3 at `levels`; rows_of(profile, level, repeat) gives each
    repeat's (ttft ms, tpot ms) per request. `old`: request rows as an older kit wrote them (no repeat, no
    ttft_s) and cells without per_repeat."""
    run_dir.mkdir()
    cells = [("baseline", "off", 80.0), ("fused", "eagle3", 120.0)]
    man = {**manifest(), "settings": {"concurrency": levels}, "matrix": [f"{p}__{s}" for p, s, _ in cells]}
    (run_dir / "manifest.json").write_text(json.dumps(man))
    for profile, spec, tps in cells:
        c = cell(profile, spec, tps, 1.0, repeats=2)
        c["by_concurrency"] = {str(lv): {**c["by_concurrency"]["1"], "output_throughput_mean": tps * lv}
                               for lv in levels}
        if not old:
            c["per_repeat"] = [{"concurrency": lv, "repeat": r, "valid": True} for lv in levels for r in (0, 1)]
        lines = []
        for lv in levels:
            for r in (0, 1):
                for ttft, tpot in rows_of(profile, lv, r):
                    row = {"ok": True, "concurrency": lv, "repeat": r, "ttft_s": ttft / 1000, "tpot_s": tpot / 1000}
                    if old:
                        del row["repeat"], row["ttft_s"]
                    lines.append(json.dumps(row))
        (run_dir / f"{profile}__{spec}.json").write_text(json.dumps(c))
        (run_dir / f"{profile}__{spec}.requests.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def _rows_of(profile, level, repeat):
    """Repeat 0: TTFT 10, 20 ms; repeat 1: 30, 40 ms (x level, +100 for fused); TPOT a tenth of TTFT."""
    base = (100 if profile == "fused" else 0)
    ttfts = [(10 + 20 * repeat) * level + base, (20 + 20 * repeat) * level + base]
    return [(t, t / 10) for t in ttfts]


def _line(md, profile, level):
    return next(x for x in md.splitlines() if x.startswith(f"| {profile} |") and f"| {level} |" in x)


def test_summary_shows_pooled_ttft_and_tpot_percentiles_per_level(tmp_path):
    d = _bundle(tmp_path / "r", [1, 2], _rows_of)
    report.build(d)
    md = (d / "summary.md").read_text()
    assert "| TTFT p50/p90/p99 ms |" in md and "| TPOT p50/p90/p99 ms |" in md
    # baseline c=1 pools 10, 20, 30, 40 ms over both repeats: p50 25, p90 37, p99 39.7 (linear)
    assert "| 25.0 / 37.0 / 39.7 |" in _line(md, "baseline", 1)
    assert "| 2.50 / 3.70 / 3.97 |" in _line(md, "baseline", 1)
    assert "| 50.0 / 74.0 / 79.4 |" in _line(md, "baseline", 2)
    assert "| 125.0 / 137.0 / 139.7 |" in _line(md, "fused", 1)
    table = list(csv.DictReader(io.StringIO((d / "summary.csv").read_text())))
    base2 = next(r for r in table if r["profile"] == "baseline" and r["concurrency"] == "2")
    assert float(base2["ttft_p50_ms"]) == pytest.approx(50.0) and float(base2["ttft_p99_ms"]) == pytest.approx(79.4)
    assert float(base2["tpot_p90_ms"]) == pytest.approx(7.4)
    assert [k for k in table[0] if k.endswith("_ms") and "_p" in k[:6]] == [
        "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms"]


def test_two_levels_plot_throughput_against_latency_and_one_level_does_not(tmp_path):
    two = _bundle(tmp_path / "two", [1, 2], _rows_of)
    written = report.build(two)
    assert two / "throughput_latency.png" in written and (two / "throughput_latency.png").stat().st_size > 1000
    assert "throughput_latency.png: output tok/s" in (two / "summary.md").read_text()
    one = _bundle(tmp_path / "one", [1], _rows_of)
    written = report.build(one)
    assert not (one / "throughput_latency.png").exists() and all("latency" not in p.name for p in written)
    assert "No throughput_latency.png: the bundle has one concurrency level" in (one / "summary.md").read_text()


def test_an_older_bundle_without_the_request_fields_still_reports(tmp_path):
    d = _bundle(tmp_path / "old", [1, 2], _rows_of, old=True)
    assert report.main([str(d)]) == 0
    md = (d / "summary.md").read_text()
    base = _line(md, "baseline", 1)
    assert "| 40.0 ± 1.0 | — | 10.00 ± 0.10 | — |" in base and "| OK |" in base
    table = list(csv.DictReader(io.StringIO((d / "summary.csv").read_text())))
    assert {r["ttft_p50_ms"] for r in table} == {r["tpot_p99_ms"] for r in table} == {""}
    assert not (d / "throughput_latency.png").exists()
    assert "No throughput_latency.png: no valid cell has a median TPOT" in md


def test_markdown_without_the_request_files_shows_no_percentiles():
    md = report.markdown(Manifest.model_validate(manifest()), [Cell.model_validate(cell("baseline", "off", 80.0, 1.0))])
    assert "| 40.0 ± 1.0 | — | 10.00 ± 0.10 | — |" in _line(md, "baseline", 1)


def test_an_invalid_cell_shows_no_percentiles(tmp_path):
    d = _bundle(tmp_path / "r", [1, 2], _rows_of)
    data = json.loads((d / "fused__eagle3.json").read_text())
    (d / "fused__eagle3.json").write_text(json.dumps({**data, "valid": False, "invalid_reason": "x"}))
    report.build(d)
    fused = _line((d / "summary.md").read_text(), "fused", 1)
    cols = [x.strip() for x in fused.split("|")[1:-1]]
    assert cols[3] == "INVALID" and cols[5:13] == ["—"] * 8
    table = list(csv.DictReader(io.StringIO((d / "summary.csv").read_text())))
    assert {r["ttft_p50_ms"] for r in table if r["profile"] == "fused"} == {""}


def test_a_request_row_with_a_damaged_ttft_is_refused_naming_the_file(tmp_path, capsys):
    d = _bundle(tmp_path / "r", [1, 2], _rows_of)
    path = d / "baseline__off.requests.jsonl"
    path.write_text(path.read_text().replace('"ttft_s": 0.01,', '"ttft_s": "0.01",', 1))
    assert report.main([str(d)]) == 2
    assert "baseline__off.requests.jsonl line 1" in capsys.readouterr().err


def test_summary_csv_columns_are_the_row_fields_in_order():
    from dataclasses import fields

    from bench.bundle import aggregate as bundle_aggregate
    from bench.report.summary_rows import CSV_FIELDS, SummaryRow

    names = [f.name for f in fields(SummaryRow)]
    assert CSV_FIELDS == [n for n in names if n != "correctness_reasons"]
    start = CSV_FIELDS.index(bundle_aggregate.POOLED_KEYS[0])
    assert CSV_FIELDS[start:start + len(bundle_aggregate.POOLED_KEYS)] == bundle_aggregate.POOLED_KEYS
    assert CSV_FIELDS[:4] == ["profile", "spec", "spec_params", "concurrency"] and CSV_FIELDS[-1] == "simulated"


def test_the_workload_line_names_every_kind_of_load():
    from bench.bundle.schema import Manifest
    from bench.report.render import _loads_text

    assert _loads_text(Manifest.model_validate({"settings": {"concurrency": [1, 4]}})) == "concurrency 1, 4"
    both = Manifest.model_validate({"settings": {"concurrency": [1], "request_rate": [2.0, 0.5], "burstiness": 0.5}})
    assert _loads_text(both) == "concurrency 1 and request rates 2, 0.5 req/s (open loop, burstiness 0.5)"
    sla = Manifest.model_validate({"settings": {"concurrency": [], "ttft_p99_ms": 500.0}})
    assert _loads_text(sla).startswith("the open-loop rates the SLA search chose")
