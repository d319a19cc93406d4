"""bench/plots.py: the bundle's PNGs; axes start at 0 so a 2% difference does not look like 2x."""

from __future__ import annotations

import json

import pytest
from matplotlib.colors import to_rgba

from bench import bundle_names, plots
from bench.bundle_schema import Cell


@pytest.fixture
def figures(monkeypatch):
    """Every figure the module closes, kept for inspection."""
    kept = []
    real_close = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig: kept.append(fig))
    yield kept
    for fig in kept:
        real_close(fig)


def _row(profile: str, tok_s: float) -> dict:
    return {"profile": profile, "spec": "eagle3", "concurrency": 1, "valid": True, "status": "PASS",
            "output_throughput_mean": tok_s, "output_throughput_sd": 0.4}


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
    rows = [_row("baseline", 80.0), {**_row("fused", 90.0), "status": "FAIL"},
            {**_row("quiet", 85.0), "status": "UNVERIFIED"}]
    plots.throughput(tmp_path / "t.png", rows, False, 1)
    (ax,) = figures[0].axes
    base, fail, unverified = ax.patches[:3]
    assert fail.get_hatch() == "//" and fail.get_edgecolor() == to_rgba("red")
    assert unverified.get_hatch() == ".." and unverified.get_edgecolor() != to_rgba("red")
    assert not base.get_hatch()
    words = {t.get_text(): t.get_color() for t in ax.texts}
    assert words == {"FAIL": "red", "not enough evidence": "dimgray"}
