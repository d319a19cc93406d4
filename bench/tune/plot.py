"""PNG of a `bench tune` result (tune.json): one horizontal bar per cell, best at the top.

Bar length = the cell's objective mean, error bar = its 95% CI (none for a cell measured once): the final repeats when the
cell was a finalist (final_n > 0; those are the numbers that decided), else the screening repeats; each
bar's text says which. The winner is green with "WINNER", the plan that was running when the tune
started is grey with "running plan", a cell that failed the correctness gate is red and hatched with
"WRONG: <reason>" (never a candidate, however fast), one the gate could not vouch for ("not enough
evidence") is dotted with "NOT VERIFIED: <reason>" (never a candidate either), a failed cell has no bar and "failed: <reason>",
a skipped one "skipped". Cells without numbers sit at the bottom. SIMULATED as in bench/report/plots.py.
Reads tune.json as bench/tune/tune_file.py's `TuneFile`, defensively: a missing or null field never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from bench.report.plots import SIM_TITLE, _mark_simulated  # noqa: E402
from bench.tune.tune_file import TuneCell, TuneFile  # noqa: E402

WINNER_COLOR = "tab:green"
INCUMBENT_COLOR = "tab:gray"
OTHER_COLOR = "tab:blue"
UNVERIFIED_COLOR = "khaki"
WRONG_COLOR = "tab:red"
REASON_CHARS = 48


def _short(text: Any, limit: int = REASON_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def shown(cell: TuneCell | Mapping[str, Any]) -> tuple[float | None, tuple[float, float] | None, int, str]:
    """(mean, ci95, n, "final"|"screening") the bar shows: the final repeats when there were any."""
    return (cell if isinstance(cell, TuneCell) else TuneCell.model_validate(cell)).shown()


def _wrong_reason(cell: TuneCell) -> str:
    corr = cell.correctness
    if corr is not None and corr.reasons:
        return corr.reasons[0]
    return str(cell.reason or (corr.status if corr else None) or "failed the correctness gate")


def ordered(cells: list[TuneCell]) -> list[TuneCell]:
    """The cells top to bottom: highest shown mean first, cells without one last (stable otherwise)."""
    keyed = [(c.shown()[0], i, c) for i, c in enumerate(cells)]
    keyed.sort(key=lambda t: (t[0] is None, -(t[0] or 0.0), t[1]))
    return [c for _, _, c in keyed]


def _title(tune: TuneFile) -> str:
    describe = tune.objective.describe or "objective"
    d = tune.decision
    outcome = d.outcome
    incumbent = tune.incumbent.label if tune.incumbent else None
    winner = (tune.winner.label if tune.winner else None) or "?"
    stays = f"running plan stays ({incumbent})" if incumbent else "running plan stays"
    if outcome in ("winner", "tie"):
        line = f"{outcome}: {winner}"
        line += f" (tied with {', '.join(d.tied)}; highest mean picked)" if d.tied else ""
    elif outcome == "running_plan_wrong":
        line = f"running plan WRONG ({incumbent}): {winner} chosen"
    elif outcome in ("worse", "underpowered", "no_gain", "no correct candidate"):
        line = f"{outcome}: {stays}"
        if d.power is not None and d.power.power_at_gain is not None:
            line += f"; a 3% gain found {d.power.power_at_gain:.0%} of the time"
    elif outcome == "not reached":
        line = f"decision not reached: {stays}"
    else:
        line = f"{outcome}" if outcome else "no decision"
    return f"{SIM_TITLE if tune.simulated else ''}{describe}\n{line}"


def figure(data: TuneFile | Mapping[str, Any]) -> Figure:
    """The plot as a pyplot Figure (the caller closes it: plt.close(fig))."""
    tune = TuneFile.read(data)
    unit = tune.objective.unit or ""
    winner_label = tune.winner.label if tune.winner else None
    incumbent_label = tune.incumbent.label if tune.incumbent else None
    cells = ordered(tune.cells)
    n = len(cells)

    # No tight_layout: it would squeeze the axes to fit the text column; savefig's bbox_inches="tight"
    # grows the image around the tick labels, the texts and the legend instead.
    fig, ax = plt.subplots(figsize=(7.0, max(3.0, 0.5 * n + 1.8)))
    highs = []
    for c in cells:
        mean, ci, _, _ = shown(c)
        if mean is not None:
            highs.append(max(mean, ci[1] if ci else mean))
    xmax = max(highs) if highs and max(highs) > 0 else 1.0
    column = ax.get_yaxis_transform()  # x in axes fraction, y in data: the texts right of the axes

    labels = []
    for i, c in enumerate(cells):
        y = n - 1 - i  # first cell at the top
        label = c.label or f"cell {i + 1}"
        labels.append(label)
        status = c.status
        mean, ci, reps, which = shown(c)
        tags = []
        # "invalid": never a candidate; red only for a FAIL, dotted for a cell the gate could not vouch for
        is_unverified = status == "invalid" and (c.correctness.status if c.correctness else None) != "FAIL"
        is_wrong = status == "invalid" and not is_unverified
        is_failed = status == "failed"
        is_winner = winner_label is not None and label == winner_label and not (is_wrong or is_unverified or is_failed)
        is_incumbent = incumbent_label is not None and label == incumbent_label
        if is_wrong:
            tags.append(f"WRONG: {_short(_wrong_reason(c))}")
        elif is_unverified:
            tags.append(f"NOT VERIFIED: {_short(_wrong_reason(c))}")
        elif is_failed:
            tags.append(f"failed: {_short(c.reason or 'server failed')}")
        elif status == "skipped":
            tags.append(f"skipped: {_short(c.reason)}" if c.reason else "skipped")
        elif mean is None:
            tags.append("no numbers")
        if is_winner:
            tags.append("WINNER")
        if is_incumbent:
            tags.append("running plan")
        if mean is not None and not is_failed and status != "skipped":
            color = WRONG_COLOR if is_wrong else UNVERIFIED_COLOR if is_unverified else WINNER_COLOR if is_winner else (
                INCUMBENT_COLOR if is_incumbent else OTHER_COLOR)
            xerr = None
            if ci is not None:
                xerr = [[max(0.0, mean - ci[0])], [max(0.0, ci[1] - mean)]]
            bars = ax.barh(y, mean, height=0.7, xerr=xerr, capsize=3, color=color,
                           hatch="//" if is_wrong else ".." if is_unverified else None,
                           edgecolor="black" if is_wrong or is_unverified or is_winner else None,
                           linewidth=1.5 if is_winner else 1.0)
            bars.patches[0].set_gid(label)
            ci_text = f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else ""
            tags.append(f"{_fmt(mean)}{ci_text} ({which}, n={reps})")
        ax.text(1.02, y, "  ".join(tags), transform=column, va="center", ha="left", fontsize=8,
                parse_math=False, color=WRONG_COLOR if is_wrong else "black",
                fontweight="bold" if is_winner or is_wrong else "normal")

    if n:
        ax.set_yticks(range(n - 1, -1, -1), labels, fontsize=9, parse_math=False)
        ax.set_ylim(-0.6, n - 0.4)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no cells", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlim(0, xmax * 1.05)  # from 0: a cut axis exaggerates small differences
    ax.set_xlabel(f"{unit} (mean)" if unit else "mean", parse_math=False)
    ax.set_title(_title(tune), parse_math=False)
    ax.legend(handles=[
        Patch(facecolor=WINNER_COLOR, edgecolor="black", label="winner"),
        Patch(facecolor=INCUMBENT_COLOR, label="running plan"),
        Patch(facecolor=OTHER_COLOR, label="other candidate"),
        Patch(facecolor=WRONG_COLOR, hatch="//", edgecolor="black", label="wrong output (not a candidate)"),
        Patch(facecolor=UNVERIFIED_COLOR, hatch="..", edgecolor="black",
              label="not enough evidence (not a candidate)"),
        Line2D([], [], color="black", marker="|", markersize=8, linestyle="-",
               label="95% CI of the mean (n > 1): final = blocked final repeats, screening = screening repeats"),
    ], loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=5.5, ncols=2, fontsize=8)
    _mark_simulated(fig, tune.simulated)
    return fig


def plot(tune: TuneFile | Mapping[str, Any], path: Path) -> Path:
    """Write the tune plot to `path` (PNG) and return `path`."""
    fig = figure(tune)
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
