"""bench/report/load_plots.py: frontier.png and latency_rate.png."""

from __future__ import annotations

from helpers_bench import load_point as point

from bench.report import load_plots


def test_the_frontier_plot_draws_each_cell_and_the_frontier_line(tmp_path, figures):
    pts = [point("a", "c=1", 100.0, 100.0, frontier=True), point("a", "c=8", 500.0, 60.0, frontier=True),
           point("b", "c=1", 90.0, 90.0), point("x", "c=1", 9.0, 9.0, status="INVALID")]
    path = load_plots.frontier(tmp_path / "frontier.png", pts, True)
    assert path is not None and path.stat().st_size > 1000
    (ax,) = figures[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"a", "b", "frontier"}  # no line for an invalid cell
    assert list(lines["frontier"].get_xdata()) == [60.0, 100.0] and list(lines["frontier"].get_ydata()) == [500.0, 100.0]
    assert "SIMULATED" in ax.get_title() and ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0


def test_the_rate_plot_has_the_sla_lines(tmp_path, figures):
    pts = [point("a", "rate=1", 10.0, 5.0, request_rate=1.0, ttft_p99_ms=100.0, tpot_p99_ms=10.0),
           point("a", "rate=4", 30.0, 4.0, request_rate=4.0, ttft_p99_ms=900.0, tpot_p99_ms=30.0)]
    path = load_plots.latency_rate(tmp_path / "lr.png", pts, False, (500.0, None))
    assert path is not None and path.is_file()
    ttft_ax, tpot_ax = figures[0].axes
    assert [line.get_label() for line in ttft_ax.get_lines()] == ["a", "SLA 500 ms"]
    assert [line.get_label() for line in tpot_ax.get_lines()] == ["a"]
    assert list(ttft_ax.get_lines()[0].get_ydata()) == [100.0, 900.0]


def test_nothing_to_draw_writes_no_file(tmp_path, figures):
    assert load_plots.write_all(tmp_path, [point("a", "c=1", None, None)], False, (None, None)) == []
    assert not list(tmp_path.iterdir()) and not figures
