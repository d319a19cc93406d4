"""bench/report/load_rows.py: one point per cell and load, the frontier, and summary.md's load section."""

from __future__ import annotations

from helpers_bench import load_point as point

from bench.bundle.cell_numbers import Level
from bench.bundle.schema import Cell, Manifest
from bench.report import load_rows
from bench.report.load_rows import mark_frontier


def test_the_frontier_holds_the_points_nothing_beats_on_both():
    pts = mark_frontier([
        point("a", "c=1", 100.0, 100.0),  # fastest per user
        point("a", "c=8", 500.0, 60.0),  # most in all
        point("b", "c=1", 90.0, 90.0),  # beaten on both by a c=1
        point("b", "c=4", 300.0, 80.0),  # on the frontier between them
        point("b", "c=8", 500.0, 50.0),  # equal total to a c=8 but slower per user: beaten
        point("c", "c=1", 900.0, 900.0, status="FAIL"),  # a FAIL never holds the frontier, nor beats anything
        point("d", "c=1", 950.0, 950.0, status="INVALID"),
        point("e", "c=1", None, 40.0),
    ])
    on = {(p.cell, p.load) for p in pts if p.frontier}
    assert on == {("a", "c=1"), ("a", "c=8"), ("b", "c=4")}


def test_equal_points_both_stay_on_the_frontier():
    pts = mark_frontier([point("a", "c=1", 100.0, 50.0), point("b", "c=1", 100.0, 50.0)])
    assert all(p.frontier for p in pts)


def _cell(**kw) -> Cell:
    lvl = Level.model_validate({"output_throughput_mean": 200.0, "median_request_output_throughput_mean": 40.0,
                                "achieved_rate_mean": 1.9, "request_throughput_mean": 1.8, "running_max_mean": 5.0})
    return Cell.model_validate({"profile": "fused", "spec": "eagle3", "valid": True, "concurrency_levels": [1],
                                "by_concurrency": {"1": lvl.to_json()}, **kw})


def test_points_take_each_closed_and_open_loop_level_in_order():
    lvl = Level.model_validate({"output_throughput_mean": 300.0, "median_request_output_throughput_mean": 30.0,
                                "request_rate": 2.0})
    cell = _cell(rate_levels=[2.0], by_rate={"2": lvl.to_json()})
    pts = load_rows.points([cell])
    assert [(p.cell, p.load, p.concurrency, p.request_rate) for p in pts] == [
        ("fused+eagle3", "c=1", 1, None), ("fused+eagle3", "rate=2", None, 2.0)]
    assert (pts[0].total_tps, pts[0].per_user_tps, pts[0].achieved_rate, pts[0].running_max) == (200.0, 40.0, 1.9, 5.0)
    assert pts[1].total_tps == 300.0 and all(p.frontier for p in pts)  # neither beats the other on both


def test_the_load_section_only_with_several_loads_and_the_rate_plot_only_with_rates():
    one = Manifest.model_validate({"settings": {"concurrency": [1]}})
    cell = _cell()
    assert load_rows.markdown_lines(one, [cell], load_rows.points([cell])) == []
    two = Manifest.model_validate({"settings": {"concurrency": [1, 4]}})
    text = "\n".join(load_rows.markdown_lines(two, [cell], load_rows.points([cell])))
    assert load_rows.FRONTIER_PNG in text and load_rows.LATENCY_RATE_PNG not in text
    with_rate = _cell(rate_levels=[2.0], by_rate={"2": Level.model_validate({"request_rate": 2.0}).to_json()})
    text = "\n".join(load_rows.markdown_lines(one, [with_rate], load_rows.points([with_rate])))
    assert "| fused+eagle3 | rate=2 | OK | 2.00 |" in text and load_rows.LATENCY_RATE_PNG in text


def test_sla_targets_come_from_the_run_settings_when_given():
    assert load_rows.sla_targets(Manifest.model_validate({"settings": {}})) == (None, None)
    m = Manifest.model_validate({"settings": {"ttft_p99_ms": 500, "tpot_p99_ms": 50.5}})
    assert load_rows.sla_targets(m) == (500.0, 50.5)


def test_csv_has_one_row_per_point():
    pts = [point("a", "c=1", 1.0, 2.0), point("a", "rate=2", 3.0, 1.0, request_rate=2.0)]
    text = load_rows.csv_text(pts)
    assert text.splitlines()[0].startswith("cell,status,load,concurrency,request_rate")
    assert len(text.splitlines()) == 3 and ",rate=2,,2.0," in text
