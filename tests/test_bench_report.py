"""bench.report: the markdown summary marks simulated runs, invalid cells and failed correctness gates."""

from __future__ import annotations

from helpers_bench import cell, manifest

from bench import report
from bench.bundle_schema import Cell


def test_markdown_marks_invalid_and_fail_and_simulated():
    cells = [cell("baseline", "off", 80.0, 1.0), cell("fused", "eagle3", 120.0, 1.0), cell("ep", "eagle3", 0, 0, valid=False)]
    cells[1]["correctness"] = {"status": "FAIL", "reasons": ["exact match 0% < 90% of baseline+eagle3"]}
    md = report.markdown({**manifest(), "simulated": True}, [Cell.model_validate(c) for c in cells])
    assert md.startswith("# SIMULATED Bench summary")
    fused = next(line for line in md.splitlines() if line.startswith("| fused"))
    assert "| FAIL |" in fused and "1.50x" in fused and "FAIL: exact match" in fused
    ep = next(line for line in md.splitlines() if line.startswith("| ep"))
    assert "INVALID" in ep and "0.0" not in ep


def test_markdown_of_a_real_run_is_not_marked_simulated():
    md = report.markdown(manifest(), [Cell.model_validate(cell("baseline", "off", 80.0, 1.0))])
    assert "SIMULATED" not in md.splitlines()[0]


def test_a_cell_without_enough_evidence_is_not_shown_as_ok():
    cells = [cell("baseline", "off", 80.0, 1.0), cell("quiet", "off", 90.0, 1.0)]
    cells[1]["correctness"] = {"status": "not enough evidence",
                               "reasons": ["the server returned no log-probabilities for this profile's correctness pass"]}
    md = report.markdown(manifest(), [Cell.model_validate(c) for c in cells])
    quiet = next(line for line in md.splitlines() if line.startswith("| quiet"))
    assert "| UNVERIFIED |" in quiet and "| OK |" not in quiet
    assert "not enough evidence: the server returned no log-probabilities" in quiet
    base = next(line for line in md.splitlines() if line.startswith("| baseline"))
    assert "| OK |" in base
