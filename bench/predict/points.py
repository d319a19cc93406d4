"""`bench predict --points BUNDLE`: which EAGLE-3 chain point should win at each load, from acceptance by draft
position (bench/bundle/acceptance.py) and each point's measured pass time.

A chain point (top-k 1) of S steps proposes S draft tokens; a shorter chain of the same greedy drafts accepts
exactly the prefix of what a longer one accepted. So, per profile and load, the cell with the longest chain gives
the acceptance of every shorter point: accept(S) = 1 + the rates of draft positions 1..S. Each point's own cell
gives its pass time at that load, its median chunk gap (one chunk is one verify pass). The predicted speed of a
point is then accept(S) / pass ms x 1000, tokens per second for one request while it decodes; the point with
the most should win there. The table sets it beside what the cell measured, so a point whose own accept length
strays from the prediction (another draft model, top-k > 1) shows as such.

Where a deeper point loses, the rate of its last position is the reason: that draft token is accepted that
often, and it costs its share of a longer pass at every verify. Speculation itself (against `off`) is not
judged here: `bench sla` and `bench tune` measure that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from bench.args import print_result
from bench.bundle import names as bundle_names
from bench.bundle.acceptance import Acceptance
from bench.bundle.schema import Cell
from launcher.errors import UserError


@dataclass(frozen=True)
class PointAtLoad:
    """One chain point of one profile at one load: its acceptance (measured, and predicted from the longest
    chain's position rates), its pass time and the speed those give; `wins` for the fastest at that load."""

    profile: str
    load: str  # `c=4`: the closed-loop levels, where the cells keep their acceptance
    cell: str  # `fused+eagle3(2,1,3)`
    steps: int
    last_position_rate: float | None  # how often its deepest draft token was accepted (the reference's rates)
    accept_measured: float | None
    accept_predicted: float | None
    pass_ms: float | None
    predicted_tps: float | None  # accept_predicted / pass_ms x 1000, one request while decoding
    measured_tps: float | None  # accept_measured / pass_ms x 1000, the same from the cell's own acceptance
    wins: bool = False


def _steps(cell: Cell) -> int | None:
    """The chain length of an EAGLE-3 cell at a top-k 1 point it names or ran; None for anything else."""
    point = cell.spec_params or cell.plan_spec_params
    if cell.spec != "eagle3" or point is None or point.topk != 1:
        return None
    return point.steps




def rank(cells: list[Cell]) -> list[PointAtLoad]:
    """Every valid chain point of every profile at every load with acceptance, the winner of each marked."""
    chains = [(c, s) for c in cells if c.valid and (s := _steps(c)) is not None]
    out: list[PointAtLoad] = []
    for profile in dict.fromkeys(c.profile for c, _ in chains):
        mine = [(c, s) for c, s in chains if c.profile == profile]
        for key in dict.fromkeys(k for c, _ in mine for k in c.acceptance):
            measured = [(c, s, c.acceptance[key]) for c, s in mine if key in c.acceptance]
            ref: Acceptance = max(measured, key=lambda m: m[1])[2]
            rows = [_row(c, s, acc, ref, key) for c, s, acc in measured]
            best = max((r.predicted_tps for r in rows if r.predicted_tps is not None), default=None)
            out += [PointAtLoad(**{**r.__dict__, "wins": best is not None and r.predicted_tps == best}) for r in rows]
    return out


def _row(cell: Cell, steps: int, own: Acceptance, ref: Acceptance, level: str) -> PointAtLoad:
    pass_ms = cell.level(level).mean("median_itl_ms")
    predicted = ref.accept_length_at(steps)
    rates = ref.position_rates
    return PointAtLoad(
        profile=cell.profile, load=f"c={level}", cell=bundle_names.cell_label(cell.profile, cell.spec, cell.spec_params),
        steps=steps, last_position_rate=rates[steps - 1] if 0 < steps <= len(rates) else None,
        accept_measured=own.accept_length, accept_predicted=predicted, pass_ms=pass_ms,
        predicted_tps=predicted / pass_ms * 1000 if predicted and pass_ms else None,
        measured_tps=own.accept_length / pass_ms * 1000 if own.accept_length and pass_ms else None)


def run(bundle_dir: str, as_json: bool) -> int:
    """`--points`: the chain points of the bundle ranked per load (bench/predict/points.py)."""
    from bench.bundle import store
    from bench.report.tables import fmt, table

    d = Path(bundle_dir)
    if not (d / "manifest.json").is_file():
        raise UserError(f"--points {bundle_dir}: no manifest.json there; give a `bench run` bundle folder")
    manifest, cells = store.load(d)
    rows = rank(cells)
    if not rows:
        raise UserError(f"--points {bundle_dir}: no valid EAGLE-3 chain cell (top-k 1) carries acceptance by draft "
                        "position; measure points with `bench run --eagle3 '1,1,2;2,1,3;3,1,4'` under --spec eagle3")

    def render(_json: object) -> None:
        from rich.console import Console

        console = Console()
        if manifest.simulated:
            console.print("SIMULATED: measured on the stand-in server", style="bold red", markup=False)
        cols = ("profile", "load", "point", "last position accepted", "accept (measured)", "accept (from rates)",
                "pass ms", "tok/s predicted", "tok/s measured", "wins")
        console.print(table("EAGLE-3 points by load", cols, [
            (r.profile, r.load, r.cell, fmt(r.last_position_rate), fmt(r.accept_measured), fmt(r.accept_predicted),
             fmt(r.pass_ms), fmt(r.predicted_tps, 1), fmt(r.measured_tps, 1), "yes" if r.wins else "")
            for r in rows], left=3))
        console.print("tok/s: one request while it decodes, accept length / pass ms; accept from rates: 1 + the "
                      "rates of positions 1..steps of the longest chain measured at that load", markup=False)

    return print_result({"points": [asdict(r) for r in rows], "simulated": bool(manifest.simulated)},
                        as_json=as_json, render=render)
