"""bench/tune/plot.py: the tune result's PNG; content checked on the Figure's texts, bars and order."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba

from bench.tune import plot as tp

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cell(label, mean, status="measured", *, ci=None, n=3, final_mean=None, final_ci=None, final_n=0,
          reason=None, correctness=None):
    return {"label": label, "status": status, "reason": reason, "mean": mean,
            "ci95": ci if ci is not None else (None if mean is None else [mean - 2, mean + 2]), "n": n,
            "final_mean": final_mean, "final_ci95": final_ci, "final_n": final_n,
            "correctness": correctness if correctness is not None else {"status": "PASS", "reasons": []}}


def _mixed(winner=True, simulated=False):
    return {
        "simulated": simulated,
        "objective": {"unit": "tok/s", "describe": "output tok/s at concurrency 1"},
        "incumbent": {"label": "baseline+off"},
        "winner": {"label": "custom-ar+eagle3(2,1,3)", "profile": "custom-ar", "spec": "eagle3",
                   "spec_params": [2, 1, 3]} if winner else None,
        "decision": {"outcome": "winner" if winner else "no_gain", "power": {"power_at_gain": 0.93}},
        "cells": [
            _cell("baseline+off", 80.0, final_mean=81.0, final_ci=[79.0, 83.0], final_n=8),
            _cell("custom-ar+eagle3(2,1,3)", 110.0, final_mean=112.0, final_ci=[108.0, 116.0], final_n=8),
            _cell("fused+eagle3(3,1,4)", 150.0, status="invalid",
                  correctness={"status": "FAIL", "reasons": ["prompt 3: output differs from greedy reference "
                                                             "at token 17 ($x$ vs y) and more words here"]}),
            _cell("fused+off", None, status="failed", reason="server did not start: OOM"),
            _cell("mscclpp+off", None, status="skipped", reason=None),
            _cell("ca+off", None, status="measured", n=0),
            _cell("ca+eagle3(1,1,2)", 95.0),
        ],
    }


@pytest.fixture
def fig_of():
    figs = []

    def make(tune):
        fig = tp.figure(tune)
        figs.append(fig)
        return fig

    yield make
    for f in figs:
        plt.close(f)


def _texts(fig):
    ax = fig.axes[0]
    return [t.get_text() for t in ax.texts] + [ax.get_title()] + [t.get_text() for t in fig.texts]


def _bar(fig, label):
    found = [p for p in fig.axes[0].patches if p.get_gid() == label]
    assert len(found) == 1, label
    return found[0]


def _top_to_bottom(fig):
    ax = fig.axes[0]
    ticks = list(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True))
    return [label for _, label in sorted(ticks, key=lambda t: -t[0])]


def test_png_is_written_and_valid(tmp_path):
    before = set(plt.get_fignums())
    path = tp.plot(_mixed(), tmp_path / "tune.png")
    assert path == tmp_path / "tune.png"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert set(plt.get_fignums()) == before  # plot closes what it opened


@pytest.mark.parametrize("winner", [True, False])
def test_mixed_result_does_not_raise(tmp_path, winner):
    path = tp.plot(_mixed(winner=winner, simulated=True), tmp_path / "t.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_winner_wrong_failed_skipped_and_running_plan_are_labelled(fig_of):
    texts = _texts(fig_of(_mixed()))
    joined = "\n".join(texts)
    assert any(t.startswith("WINNER") for t in texts)
    wrong = [t for t in texts if t.startswith("WRONG: ")]
    assert len(wrong) == 1 and "prompt 3: output differs" in wrong[0]
    assert wrong[0].split("  ")[0].endswith("…")  # long reason cut short
    assert "failed: server did not start: OOM" in joined
    assert "skipped" in texts
    assert "no numbers" in texts
    assert any("running plan" in t for t in texts)
    assert "winner: custom-ar+eagle3(2,1,3)" in joined
    assert "output tok/s at concurrency 1" in joined


def test_finalists_show_their_final_numbers(fig_of):
    fig = fig_of(_mixed())
    assert _bar(fig, "custom-ar+eagle3(2,1,3)").get_width() == pytest.approx(112.0)
    assert _bar(fig, "ca+eagle3(1,1,2)").get_width() == pytest.approx(95.0)
    texts = _texts(fig)
    assert any("(final, n=8)" in t and "WINNER" in t for t in texts)
    assert any("(screening, n=3)" in t for t in texts)


def test_winner_and_wrong_bars_differ_and_failed_has_no_bar(fig_of):
    fig = fig_of(_mixed())
    win, wrong = _bar(fig, "custom-ar+eagle3(2,1,3)"), _bar(fig, "fused+eagle3(3,1,4)")
    assert win.get_facecolor() != wrong.get_facecolor()
    assert wrong.get_facecolor() == to_rgba(tp.WRONG_COLOR)
    assert wrong.get_hatch() == "//" and not win.get_hatch()
    assert _bar(fig, "baseline+off").get_facecolor() not in (win.get_facecolor(), wrong.get_facecolor())
    gids = {p.get_gid() for p in fig.axes[0].patches}
    assert not gids & {"fused+off", "mscclpp+off", "ca+off"}


def test_highest_mean_on_top_and_cells_without_numbers_at_the_bottom(fig_of):
    order = _top_to_bottom(fig_of(_mixed()))
    assert order[:4] == ["fused+eagle3(3,1,4)", "custom-ar+eagle3(2,1,3)", "ca+eagle3(1,1,2)", "baseline+off"]
    assert set(order[4:]) == {"fused+off", "mscclpp+off", "ca+off"}


def test_no_winner_title_says_the_running_plan_stays(fig_of):
    fig = fig_of(_mixed(winner=False))
    title = fig.axes[0].get_title()
    assert "no_gain: running plan stays (baseline+off); a 3% gain found 93% of the time" in title
    assert not any(t.startswith("WINNER") for t in _texts(fig))


def test_simulated_is_marked(fig_of):
    assert "SIMULATED" in fig_of(_mixed(simulated=True)).axes[0].get_title()
    assert any(t.get_text() == "SIMULATED" for t in fig_of(_mixed(simulated=True)).texts)
    assert "SIMULATED" not in "\n".join(_texts(fig_of(_mixed(simulated=False))))


def test_height_grows_with_cells(fig_of):
    tune = _mixed()
    small = fig_of(tune).get_size_inches()[1]
    tune["cells"] = tune["cells"] + [_cell(f"extra{i}", 50.0 + i) for i in range(20)]
    assert fig_of(tune).get_size_inches()[1] > small


@pytest.mark.parametrize("tune", [
    {},
    {"cells": None, "objective": None, "decision": None, "incumbent": None, "winner": None},
    {"cells": [{}], "decision": {"outcome": "not reached"}},
    {"cells": [{"label": "a", "status": "measured", "mean": float("nan"), "ci95": [1, None], "final_n": 3,
                "final_mean": None, "correctness": None}, "junk", None,
               {"label": "b", "status": "invalid", "mean": None, "correctness": {"reasons": None}}]},
])
def test_sparse_or_malformed_input_does_not_raise(tmp_path, tune):
    assert tp.plot(tune, tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC


def test_not_enough_evidence_is_not_drawn_as_wrong_nor_as_a_candidate(fig_of):
    tune = _mixed(winner=False)
    tune["cells"].append(_cell("quiet+off", 140.0, status="invalid",
                               correctness={"status": "not enough evidence", "reasons": ["40 tokens compared < 200"]}))
    fig = fig_of(tune)
    quiet, wrong = _bar(fig, "quiet+off"), _bar(fig, "fused+eagle3(3,1,4)")
    assert quiet.get_facecolor() == to_rgba(tp.UNVERIFIED_COLOR) != wrong.get_facecolor()
    assert quiet.get_hatch() == ".." and wrong.get_hatch() == "//"
    texts = _texts(fig)
    assert any(t.startswith("NOT VERIFIED: 40 tokens compared") for t in texts)
    assert not any(t.startswith("WRONG: 40 tokens") for t in texts)


def test_a_cell_measured_once_gets_no_interval(fig_of):
    """One value has no 95% CI: no error bar, no bracketed interval, n=1 said."""
    tune = _mixed()
    tune["cells"] = [_cell("once+off", 90.0, ci=[90.0, 90.0], n=1), _cell("twice+off", 95.0, n=2)]
    fig = fig_of(tune)
    texts = _texts(fig)
    once = next(t for t in texts if "90.0" in t)
    twice = next(t for t in texts if "95.0" in t)
    assert "[" not in once and "n=1" in once and "[93.0, 97.0]" in twice
    assert tp.shown(tune["cells"][0])[1] is None and tp.shown(tune["cells"][1])[1] == (93.0, 97.0)


def test_tune_file_keeps_cells_given_as_records_or_json():
    from bench.tune.tune_file import TuneCell, TuneFile

    made = TuneFile.model_validate({"cells": [TuneCell(label="a+off", mean=1.0, n=1), {"label": "b+off"}, "junk"]})
    assert [c.label for c in made.cells] == ["a+off", "b+off"]
    assert TuneFile.read(made.to_json()).cells == made.cells  # written, read back the same
