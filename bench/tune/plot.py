"""PNG of a `bench tune` result (tune.json): one horizontal bar per cell, best at the top.

Bar length = the cell's objective mean, error bar = its 95% CI (none for a cell measured once): the final repeats when the
cell was a finalist (final_n > 0; those are the numbers that decided), else the screening repeats; each
bar's text says which. The winner is green with "WINNER", the plan that was running when the tune
started is grey with "running plan", a cell that failed the correctness gate is red and hatched with
"WRONG: <reason>" (never a candidate, however fast), one the gate could not vouch for ("not enough
evidence") is dotted with "NOT VERIFIED: <reason>" (never a candidate either), a failed cell has no bar and "failed: <reason>",
a skipped one "skipped". Cells without numbers sit at the bottom. SIMULATED as in bench/report/plots.py.
Reads tune.json defensively: a missing or null field never raises.
"""

from __future__ import annotations

import math
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

WINNER_COLOR = "tab:green"
INCUMBENT_COLOR = "tab:gray"
OTHER_COLOR = "tab:blue"
UNVERIFIED_COLOR = "khaki"
WRONG_COLOR = "tab:red"
REASON_CHARS = 48


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _ci(x: Any) -> tuple[float, float] | None:
    if not isinstance(x, list | tuple) or len(x) != 2:
        return None
    lo, hi = _num(x[0]), _num(x[1])
    return None if lo is None or hi is None else (lo, hi)


def _int(x: Any) -> int:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else 0


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _short(text: Any, limit: int = REASON_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def shown(cell: Mapping[str, Any]) -> tuple[float | None, tuple[float, float] | None, int, str]:
    """(mean, ci95, n, "final"|"screening") the bar shows: the final repeats when there were any."""
    final_n = _int(cell.get("final_n"))
    if final_n > 0 and _num(cell.get("final_mean")) is not None:
        return _num(cell.get("final_mean")), _ci(cell.get("final_ci95")) if final_n > 1 else None, final_n, "final"
    n = _int(cell.get("n"))  # one value has no interval: none is drawn
    return _num(cell.get("mean")), _ci(cell.get("ci95")) if n > 1 else None, n, "screening"


def _wrong_reason(cell: Mapping[str, Any]) -> str:
    corr = _map(cell.get("correctness"))
    reasons = corr.get("reasons")
    if isinstance(reasons, list | tuple) and reasons and reasons[0] not in (None, ""):
        return str(reasons[0])
    return str(cell.get("reason") or corr.get("status") or "failed the correctness gate")


def ordered(cells: Any) -> list[Mapping[str, Any]]:
    """The cells top to bottom: highest shown mean first, cells without one last (stable otherwise)."""
    cells = [c for c in (cells if isinstance(cells, list | tuple) else []) if isinstance(c, Mapping)]
    keyed = [(shown(c)[0], i, c) for i, c in enumerate(cells)]
    keyed.sort(key=lambda t: (t[0] is None, -(t[0] or 0.0), t[1]))
    return [c for _, _, c in keyed]


def _title(tune: Mapping[str, Any]) -> str:
    describe = _map(tune.get("objective")).get("describe") or "objective"
    outcome = _map(tune.get("decision")).get("outcome")
    incumbent = _map(tune.get("incumbent")).get("label")
    stays = f"running plan stays ({incumbent})" if incumbent else "running plan stays"
    if outcome in ("winner", "tie"):
        tied = _map(tune.get("decision")).get("tied") or []
        line = f"{outcome}: {_map(tune.get('winner')).get('label') or '?'}"
        line += f" (tied with {', '.join(map(str, tied))}; highest mean picked)" if tied else ""
    elif outcome == "running_plan_wrong":
        line = f"running plan WRONG ({incumbent}): {_map(tune.get('winner')).get('label') or '?'} chosen"
    elif outcome in ("worse", "underpowered", "no_gain", "no correct candidate"):
        power = _map(_map(tune.get("decision")).get("power"))
        line = f"{outcome}: {stays}"
        if isinstance(power.get("power_at_gain"), int | float):
            line += f"; a 3% gain found {power['power_at_gain']:.0%} of the time"
    elif outcome == "not reached":
        line = f"decision not reached: {stays}"
    else:
        line = f"{outcome}" if outcome else "no decision"
    return f"{SIM_TITLE if tune.get('simulated') else ''}{describe}\n{line}"


def figure(tune: Mapping[str, Any]) -> Figure:
    """The plot as a pyplot Figure (the caller closes it: plt.close(fig))."""
    tune = _map(tune)
    unit = _map(tune.get("objective")).get("unit") or ""
    winner_label = _map(tune.get("winner")).get("label")
    incumbent_label = _map(tune.get("incumbent")).get("label")
    cells = ordered(tune.get("cells"))
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
        label = str(c.get("label") or f"cell {i + 1}")
        labels.append(label)
        status = c.get("status")
        mean, ci, reps, which = shown(c)
        tags = []
        # "invalid": never a candidate; red only for a FAIL, dotted for a cell the gate could not vouch for
        is_unverified = status == "invalid" and _map(c.get("correctness")).get("status") != "FAIL"
        is_wrong = status == "invalid" and not is_unverified
        is_failed = status == "failed"
        is_winner = winner_label is not None and label == winner_label and not (is_wrong or is_unverified or is_failed)
        is_incumbent = incumbent_label is not None and label == incumbent_label
        if is_wrong:
            tags.append(f"WRONG: {_short(_wrong_reason(c))}")
        elif is_unverified:
            tags.append(f"NOT VERIFIED: {_short(_wrong_reason(c))}")
        elif is_failed:
            tags.append(f"failed: {_short(c.get('reason') or 'server failed')}")
        elif status == "skipped":
            tags.append(f"skipped: {_short(c['reason'])}" if c.get("reason") else "skipped")
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
    _mark_simulated(fig, bool(tune.get("simulated")))
    return fig


def plot(tune: Mapping[str, Any], path: Path) -> Path:
    """Write the tune plot to `path` (PNG) and return `path`."""
    fig = figure(tune)
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
