"""bench/report/energy_table.py: the energy section and energy.csv, or the one line that says why not."""

from __future__ import annotations

from bench.bundle.cell_numbers import Level, RepeatSummary
from bench.bundle.schema import Cell, Manifest
from bench.report import energy_table


def _cell(valid: bool = True) -> Cell:
    level = Level.model_validate({"joules_per_token_mean": 0.25, "average_watts_mean": 1200.0})
    rep = RepeatSummary(repeat=0, concurrency=4, valid=True, energy_method="power-samples", joules_per_token=0.25)
    return Cell.model_validate({"profile": "fused", "spec": "eagle3", "valid": valid, "concurrency_levels": [1, 4],
                                "by_concurrency": {"4": level.to_json()}, "per_repeat": [rep.to_json()]})


def test_a_measured_run_gets_a_row_per_load_that_has_a_reading():
    m = Manifest.model_validate({"energy": {"measured": True, "gpus": 8}})
    text = "\n".join(energy_table.markdown_lines(m, [_cell(), _cell(valid=False)]))
    assert "8 GPU(s)" in text
    assert "| fused+eagle3 | c=4 | 0.250 | 1200 | 4.00 | power-samples |" in text
    assert "c=1" not in text and text.count("| fused+eagle3 |") == 1  # no reading at c=1, none for an invalid cell
    csv = energy_table.csv_text(m, [_cell()])
    assert csv is not None and csv.splitlines()[1] == "fused+eagle3,c=4,0.25,1200.0,4.0,power-samples"


def test_a_run_without_nvml_says_why_and_has_no_columns():
    m = Manifest.model_validate({"energy": {"measured": False, "reason": "nvidia-ml-py is not installed"}})
    assert energy_table.markdown_lines(m, [_cell()]) == [
        "", "Energy: not measured (nvidia-ml-py is not installed); no energy columns."]
    assert energy_table.csv_text(m, [_cell()]) is None


def test_an_older_bundle_says_nothing():
    m = Manifest.model_validate({})
    assert energy_table.markdown_lines(m, [_cell()]) == [] and energy_table.csv_text(m, [_cell()]) is None
