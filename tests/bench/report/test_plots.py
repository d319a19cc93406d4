"""bench/report/plots.py: the bundle's PNGs; axes start at 0 so a 2% difference does not look like 2x."""

from __future__ import annotations

import json
from dataclasses import fields

from matplotlib.colors import to_rgba

from bench.bundle import names as bundle_names
from bench.bundle.schema import Cell, Manifest
from bench.report import plots
from bench.report.render import SummaryRow


def summary_row(**kw) -> SummaryRow:
    """A summary row with the given fields, every other one None."""
    return SummaryRow(**{**{f.name: None for f in fields(SummaryRow)}, "correctness_reasons": [], **kw})


def _row(profile: str, tok_s: float, status: str = "PASS") -> SummaryRow:
    return summary_row(profile=profile, spec="eagle3", concurrency=1, valid=True, status=status,
                       output_throughput_mean=tok_s, output_throughput_sd=0.4)


def test_throughput_axis_starts_at_zero_even_for_close_values(tmp_path, figures):
    path = plots.throughput(tmp_path / "t.png", [_row("baseline", 80.0), _row("fused", 82.0)], False, 1)
    assert path.is_file() and path.stat().st_size > 0
    (ax,) = figures[0].axes
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 82.0


def test_tpot_axis_starts_at_zero(tmp_path, figures):
    for profile, base in (("baseline", 16.0), ("fused", 15.5)):
        lines = [json.dumps({"ok": True, "concurrency": 1, "tpot_s": (base + i * 0.01) / 1000}) for i in range(20)]
        (tmp_path / bundle_names.requests_file(profile, 'eagle3')).write_text("\n".join(lines))
    cells = [Cell(profile=p, spec="eagle3", valid=True) for p in ("baseline", "fused")]
    plots.tpot(tmp_path / "tpot.png", tmp_path, cells, False, 1)
    (ax,) = figures[0].axes
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 16.0


def test_only_a_fail_is_hatched_red_and_not_enough_evidence_is_marked_apart(tmp_path, figures):
    rows = [_row("baseline", 80.0), _row("fused", 90.0, status="FAIL"), _row("quiet", 85.0, status="UNVERIFIED")]
    plots.throughput(tmp_path / "t.png", rows, False, 1)
    (ax,) = figures[0].axes
    base, fail, unverified = ax.patches[:3]
    assert fail.get_hatch() == "//" and fail.get_edgecolor() == to_rgba("red")
    assert unverified.get_hatch() == ".." and unverified.get_edgecolor() != to_rgba("red")
    assert not base.get_hatch()
    words = {t.get_text(): t.get_color() for t in ax.texts}
    assert words == {"FAIL": "red", "not enough evidence": "dimgray"}


def _level(profile: str, spec: str, concurrency: int, tok_s: float, tpot_p50: float | None, **kw) -> SummaryRow:
    return summary_row(**{"profile": profile, "spec": spec, "concurrency": concurrency, "valid": True, "status": "OK",
                          "output_throughput_mean": tok_s, "output_throughput_sd": 0.4, "tpot_p50_ms": tpot_p50, **kw})


def test_throughput_latency_draws_one_line_per_cell_and_one_point_per_level(tmp_path, figures):
    rows = [_level("baseline", "off", 1, 80.0, 12.0), _level("baseline", "off", 4, 250.0, 15.0),
            _level("fused", "eagle3", 1, 120.0, 8.0, status="FAIL"), _level("fused", "eagle3", 4, 300.0, 11.0, status="FAIL"),
            _level("ep", "eagle3", 1, 0.0, None, valid=False), _level("ep", "eagle3", 4, 0.0, None, valid=False)]
    path = plots.throughput_latency(tmp_path / "throughput_latency.png", rows, False)
    assert path is not None and path.stat().st_size > 1000
    (ax,) = figures[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"baseline+off", "fused+eagle3 (FAIL)"}  # the invalid cell has no line
    assert list(lines["baseline+off"].get_xdata()) == [12.0, 15.0]
    assert list(lines["baseline+off"].get_ydata()) == [80.0, 250.0]
    assert lines["fused+eagle3 (FAIL)"].get_linestyle() == "--"
    assert "TPOT" in ax.get_xlabel() and "p50" in ax.get_xlabel() and "tok/s" in ax.get_ylabel()
    assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
    assert sorted(t.get_text() for t in ax.texts) == ["c=1", "c=1", "c=4", "c=4"]


def test_no_throughput_latency_plot_without_a_point(tmp_path, figures):
    rows = [_level("baseline", "off", 1, 80.0, None), _level("baseline", "off", 4, 250.0, None)]
    assert plots.throughput_latency(tmp_path / "tl.png", rows, False) is None
    assert not (tmp_path / "tl.png").exists() and not figures


def test_write_all_plots_throughput_latency_only_with_two_levels(tmp_path, figures):
    cells = [Cell(profile="baseline", spec="off", valid=True)]
    one = [_level("baseline", "off", 1, 80.0, 12.0)]
    written = plots.write_all(tmp_path, Manifest.model_validate({"settings": {"concurrency": [1]}}), cells, one)
    assert not (tmp_path / "throughput_latency.png").exists()
    assert [p.name for p in written] == ["throughput.png", "tpot.png"]
    two = [*one, _level("baseline", "off", 4, 250.0, 15.0)]
    written = plots.write_all(tmp_path, Manifest.model_validate({"settings": {"concurrency": [1, 4]}}), cells, two)
    assert (tmp_path / "throughput_latency.png").is_file() and written[-1].name == "throughput_latency.png"
