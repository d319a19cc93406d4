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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
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


@dataclass(frozen=True)
class _Role:
    """What a cell is on the plot: wrong output, not verified, failed, the winner, the running plan."""

    wrong: bool
    unverified: bool
    failed: bool
    winner: bool
    incumbent: bool

    @classmethod
    def of(cls, cell: TuneCell, label: str, winner_label: str | None, incumbent_label: str | None) -> _Role:
        # "invalid": never a candidate; red only for a FAIL, dotted for a cell the gate could not vouch for
        unverified = cell.status == "invalid" and (cell.correctness.status if cell.correctness else None) != "FAIL"
        wrong = cell.status == "invalid" and not unverified
        failed = cell.status == "failed"
        winner = winner_label is not None and label == winner_label and not (wrong or unverified or failed)
        return cls(wrong, unverified, failed, winner, incumbent_label is not None and label == incumbent_label)

    @property
    def color(self) -> str:
        return WRONG_COLOR if self.wrong else UNVERIFIED_COLOR if self.unverified else WINNER_COLOR if self.winner else (
            INCUMBENT_COLOR if self.incumbent else OTHER_COLOR)


def _status_tags(cell: TuneCell, role: _Role, mean: float | None) -> list[str]:
    """The texts before a cell's numbers: why it is not a candidate (or has no numbers), WINNER, running plan."""
    tags = []
    if role.wrong:
        tags.append(f"WRONG: {_short(_wrong_reason(cell))}")
    elif role.unverified:
        tags.append(f"NOT VERIFIED: {_short(_wrong_reason(cell))}")
    elif role.failed:
        tags.append(f"failed: {_short(cell.reason or 'server failed')}")
    elif cell.status == "skipped":
        tags.append(f"skipped: {_short(cell.reason)}" if cell.reason else "skipped")
    elif mean is None:
        tags.append("no numbers")
    if role.winner:
        tags.append("WINNER")
    if role.incumbent:
        tags.append("running plan")
    return tags


def _bar(ax: Axes, y: int, label: str, role: _Role, mean: float, ci: tuple[float, float] | None) -> None:
    """One cell's bar with its 95% CI, coloured and hatched for its role; its patch named by the cell's label."""
    xerr = None
    if ci is not None:
        xerr = [[max(0.0, mean - ci[0])], [max(0.0, ci[1] - mean)]]
    bars = ax.barh(y, mean, height=0.7, xerr=xerr, capsize=3, color=role.color,
                   hatch="//" if role.wrong else ".." if role.unverified else None,
                   edgecolor="black" if role.wrong or role.unverified or role.winner else None,
                   linewidth=1.5 if role.winner else 1.0)
    bars.patches[0].set_gid(label)


def _row(ax: Axes, y: int, cell: TuneCell, label: str, role: _Role) -> None:
    """One cell's row: its bar when it has numbers, and its text right of the axes."""
    mean, ci, reps, which = shown(cell)
    tags = _status_tags(cell, role, mean)
    if mean is not None and not role.failed and cell.status != "skipped":
        _bar(ax, y, label, role, mean, ci)
        ci_text = f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else ""
        tags.append(f"{_fmt(mean)}{ci_text} ({which}, n={reps})")
    ax.text(1.02, y, "  ".join(tags), transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=8,
            parse_math=False, color=WRONG_COLOR if role.wrong else "black",
            fontweight="bold" if role.winner or role.wrong else "normal")


def _x_max(cells: list[TuneCell]) -> float:
    """The longest bar with its error bar (1.0 with none): the x axis ends a little past it."""
    highs = []
    for c in cells:
        mean, ci, _, _ = shown(c)
        if mean is not None:
            highs.append(max(mean, ci[1] if ci else mean))
    return max(highs) if highs and max(highs) > 0 else 1.0


def _legend(ax: Axes) -> None:
    """The legend under the axes: one entry per bar style, and what the error bar is."""
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
    labels = []
    for i, c in enumerate(cells):
        label = c.label or f"cell {i + 1}"
        labels.append(label)
        _row(ax, n - 1 - i, c, label, _Role.of(c, label, winner_label, incumbent_label))  # first cell at the top

    if n:
        ax.set_yticks(range(n - 1, -1, -1), labels, fontsize=9, parse_math=False)
        ax.set_ylim(-0.6, n - 0.4)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no cells", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlim(0, _x_max(cells) * 1.05)  # from 0: a cut axis exaggerates small differences
    ax.set_xlabel(f"{unit} (mean)" if unit else "mean", parse_math=False)
    ax.set_title(_title(tune), parse_math=False)
    _legend(ax)
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
