"""bench.bundle.store: bundles already written still load, the same summaries come out of them, and load keeps its order.

The bundles read here are committed: any under docs/evidence/, and tests/fixtures/bundles/, a SIMULATED
`bench run` (baseline, a wrong all-reduce, a server that dies mid-stream, a failed switch; eagle3, off
and the point 1,1,2; concurrency 1 and 2) written by the kit before cells were one typed record.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.bundle import store as bundle
from bench.bundle.schema import Cell
from bench.report import render as report
from launcher.errors import UserError
from testsupport.stack import REPO

COMMITTED = sorted(p.parent for where in ("docs/evidence", "tests/fixtures/bundles")
                   for p in (REPO / where).rglob("manifest.json"))


def test_there_are_committed_bundles_to_read():
    assert any(d.is_relative_to(REPO / "tests/fixtures/bundles") for d in COMMITTED), COMMITTED


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda d: str(d.relative_to(REPO)))
def test_a_committed_bundle_loads_and_every_key_it_holds_is_written_back_the_same(run_dir):
    manifest, cells = bundle.load(run_dir)
    files = sorted(p for p in run_dir.glob("*.json") if p.name != "manifest.json")
    assert len(cells) == len(files) > 0
    assert [c.key for c in cells] == [k for k in manifest.matrix if (run_dir / f"{k}.json").is_file()]
    for cell in cells:
        old = json.loads((run_dir / f"{cell.key}.json").read_text())
        new = cell.to_json()
        assert {k: new.get(k) for k in old} == old, cell.key
        assert bundle.read_cell(run_dir / f"{cell.key}.json") == cell


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda d: str(d.relative_to(REPO)))
def test_a_committed_bundle_gives_the_summaries_it_was_written_with(run_dir, tmp_path):
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    report.build(copy)
    for name in ("summary.md", "summary.csv"):
        assert (copy / name).read_text() == (run_dir / name).read_text(), name


def test_the_fixture_holds_every_kind_of_cell():
    _, cells = bundle.load(next(d for d in COMMITTED if d.is_relative_to(REPO / "tests/fixtures/bundles")))
    by = {c.label: c for c in cells}
    assert by["baseline+eagle3(1,1,2)"].spec_params is not None and by["baseline+off"].valid
    assert by["fused+eagle3"].correctness.status == "FAIL"
    assert not by["nccl-tuned+off"].valid and by["nccl-tuned+off"].first_level().value("output_throughput") is None
    assert by["crashy+off"].switch["outcome"] == "rolled_back" and by["crashy+off"].backends is None
    assert set(by["baseline+off"].by_concurrency) == {"1", "2"}


def write(run_dir: Path, matrix: list[str], cells: list[dict]) -> None:
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"matrix": matrix}))
    for c in cells:
        (run_dir / f"{c['profile']}__{c['spec']}.json").write_text(json.dumps(c))


def test_load_orders_cells_as_the_matrix_and_skips_json_that_is_no_cell(tmp_path):
    cells = [{"profile": p, "spec": "off", "valid": True} for p in ("a", "b", "c")]
    write(tmp_path / "r", ["c__off", "a__off"], cells)
    (tmp_path / "r" / "tune.json").write_text(json.dumps({"cells": []}))
    _, loaded = bundle.load(tmp_path / "r")
    assert [c.key for c in loaded] == ["c__off", "a__off", "b__off"]
    assert all(isinstance(c, Cell) and c.valid for c in loaded)


def test_load_names_the_damaged_file_and_its_key(tmp_path):
    write(tmp_path / "r", ["a__off"], [{"profile": "a", "spec": "off", "switch": "switched"}])
    with pytest.raises(UserError, match=r"a__off\.json: key 'switch'"):
        bundle.load(tmp_path / "r")


def test_load_of_a_folder_above_a_bundle_points_at_it(tmp_path):
    write(tmp_path / "r", [], [])
    with pytest.raises(UserError, match="did you mean"):
        bundle.load(tmp_path)
