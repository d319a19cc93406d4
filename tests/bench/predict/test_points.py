"""bench/predict/points.py: chain points ranked per load from the longest chain's position rates and each point's
own pass time; `bench predict --points` prints them."""

from __future__ import annotations

import json

import pytest

from bench.bundle.acceptance import Acceptance
from bench.bundle.cell_numbers import Level
from bench.bundle.schema import Cell
from bench.predict import cli, points
from launcher.errors import UserError


def _cell(steps: int, itl_ms: float, hist: list[int], *, profile: str = "fused", topk: int = 1,
          valid: bool = True, spec: str = "eagle3") -> Cell:
    acc = Acceptance(correct_drafts_histogram=hist)
    draft = steps + 1 if topk == 1 else steps * topk
    return Cell.model_validate({
        "profile": profile, "spec": spec, "valid": valid, "concurrency_levels": [1],
        "spec_params": {"steps": steps, "topk": topk, "draft_tokens": draft},
        "by_concurrency": {"1": Level.model_validate({"median_itl_ms_mean": itl_ms}).to_json()},
        "acceptance": {"1": acc.model_dump()}})


LONG = [10, 20, 30, 40]  # 100 verifies of (3,1,4): position rates 0.9, 0.7, 0.4


def test_the_longest_chain_gives_every_shorter_points_acceptance_and_the_fastest_wins():
    rows = points.rank([_cell(1, 20.0, [10, 90]), _cell(3, 40.0, LONG)])
    by = {r.steps: r for r in rows}
    assert by[1].accept_predicted == pytest.approx(1.9) and by[3].accept_predicted == pytest.approx(3.0)
    assert by[1].last_position_rate == pytest.approx(0.9) and by[3].last_position_rate == pytest.approx(0.4)
    assert by[1].predicted_tps == pytest.approx(95.0) and by[3].predicted_tps == pytest.approx(75.0)
    assert by[1].accept_measured == pytest.approx(1.9) and by[1].measured_tps == pytest.approx(95.0)
    assert [r.steps for r in rows if r.wins] == [1] and all(r.load == "c=1" for r in rows)


def test_a_cheaper_pass_makes_the_deeper_point_win():
    rows = points.rank([_cell(1, 20.0, [10, 90]), _cell(3, 30.0, LONG)])
    assert [r.steps for r in rows if r.wins] == [3]  # 3.0 / 30 ms beats 1.9 / 20 ms


def test_only_valid_top_k_1_eagle3_cells_per_profile():
    rows = points.rank([_cell(1, 20.0, [10, 90]), _cell(3, 40.0, LONG, valid=False), _cell(2, 5.0, [1, 1, 1], topk=2),
                        _cell(2, 30.0, [5, 5, 90], profile="custom-ar")])
    assert {(r.profile, r.steps) for r in rows} == {("fused", 1), ("custom-ar", 2)}
    assert all(r.wins for r in rows)  # each profile's only point wins its load


def test_the_cli_prints_the_ranking_as_json_and_refuses_a_bundle_without_points(tmp_path, capsys):
    from bench.bundle import store

    store.write_manifest(tmp_path, {"run_id": "r", "simulated": True, "settings": {"concurrency": [1]},
                                    "matrix": ["fused__eagle3__1-1-2", "fused__eagle3__3-1-4"]})
    for c in (_cell(1, 20.0, [10, 90]), _cell(3, 40.0, LONG)):
        store.write_cell(tmp_path, c)
    assert cli.main(["--points", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["simulated"] is True and [r["steps"] for r in out["points"] if r["wins"]] == [1]
    with pytest.raises(UserError, match="no manifest.json"):
        points.run(str(tmp_path / "nowhere"), True)
    empty = tmp_path / "empty"
    empty.mkdir()
    store.write_manifest(empty, {"run_id": "e", "settings": {"concurrency": [1]}, "matrix": []})
    with pytest.raises(UserError, match="--eagle3"):
        points.run(str(empty), True)
