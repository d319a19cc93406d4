"""bench.report.acceptance_table: summary.md's acceptance-by-draft-position section and acceptance.csv, only for
cells that carry acceptance."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers_bench import cell, manifest

from bench.bundle.schema import Cell, Manifest
from bench.report import acceptance_table
from bench.report import render as report


def _cells() -> list[Cell]:
    fused = {**cell("fused", "eagle3", 120.0, 1.0), "spec_params": {"steps": 3, "topk": 1, "draft_tokens": 4},
             "acceptance": {"1": {"correct_drafts_histogram": [10, 20, 30, 40]},
                            "4": {"correct_drafts_histogram": [50, 50]}},
             "acceptance_by_rate": {"2.5": {"correct_drafts_histogram": [1, 3]}}}
    return [Cell.model_validate(cell("baseline", "off", 80.0, 1.0)), Cell.model_validate(fused)]


def test_the_section_has_a_column_per_position_and_a_row_per_level():
    lines = acceptance_table.markdown_lines(_cells())
    assert "## Acceptance by draft position" in lines and "fused+eagle3(3,1,4):" in lines
    assert not any(line.startswith("baseline+off") for line in lines)  # no acceptance: not shown
    head = next(line for line in lines if line.startswith("| load"))
    assert "| pos 1 | pos 2 | pos 3 |" in head
    one = next(line for line in lines if line.startswith("| c=1 |"))
    assert one.startswith("| c=1 | 100 | 3.00 | 90.0% (90.0%) | 70.0% (77.8%) | 40.0% (57.1%) |")
    assert one.endswith("| 10 / 20 / 30 / 40 |")
    four = next(line for line in lines if line.startswith("| c=4 |"))
    assert "| 50.0% (50.0%) | — | — |" in four  # a shorter histogram leaves the further positions empty
    assert next(line for line in lines if line.startswith("| rate=2.5 |")).startswith("| rate=2.5 | 4 | 1.75 | 75.0%")


def test_the_csv_has_a_row_per_bin_with_its_position_rate():
    rows = list(csv.DictReader(io.StringIO(acceptance_table.csv_text(_cells()))))
    assert len(rows) == 4 + 2 + 2
    assert [(r["concurrency"], r["request_rate"]) for r in rows[-2:]] == [("", "2.5")] * 2
    first, second = rows[0], rows[1]
    assert (first["spec"], first["spec_params"], first["concurrency"]) == ("eagle3(3,1,4)", "3,1,4", "1")
    assert (first["correct_drafts"], first["tokens_accepted"], first["verifies_at"], first["position_rate"]) == (
        "0", "1", "10", "")
    assert float(second["position_rate"]) == pytest.approx(0.9) and float(rows[3]["conditional_rate"]) == pytest.approx(4 / 7)
    assert acceptance_table.csv_text(_cells()[:1]) is None


def test_the_summary_carries_the_section_only_when_a_cell_has_acceptance():
    md = report.markdown(Manifest.model_validate(manifest()), _cells())
    assert md.index("| fused | eagle3(3,1,4) |") < md.index("## Acceptance by draft position") < md.index("How to read")
    assert "Acceptance by draft position" not in report.markdown(Manifest.model_validate(manifest()), _cells()[:1])


def test_build_writes_acceptance_csv_only_when_a_cell_has_acceptance(tmp_path):
    for name, cells in (("with", _cells()), ("without", _cells()[:1])):
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({**manifest(), "matrix": [c.key for c in cells]}))
        for c in cells:
            (d / f"{c.key}.json").write_text(json.dumps(c.to_json()))
        written = report.build(d)
        assert ((d / "acceptance.csv") in written) == (name == "with")
        assert (d / "acceptance.csv").exists() == (name == "with")
