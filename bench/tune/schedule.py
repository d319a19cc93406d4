"""The final comparison's schedule: blocks of repeats, one switch per block, in a mirrored order.

On the target a switch reloads the model (minutes), so one switch per repeat (A B C A B C …, 8 rounds:
24 switches for two finalists and the running plan) costs hours. Here every arm gets `blocks` blocks of
its repeats and the passes run forward, then backward, then forward …:

    blocks=2, arms A B C:   A A A A | B B B B | C C C C | C C C C | B B B B | A A A A
                            pass 1 (forward)              pass 2 (backward)

Two neighbouring blocks of one arm (C C above) run without a switch between them, so 3 arms cost 5
switches instead of 24. Mirroring balances drift: under a drift linear in time every arm's blocks sit,
on average, at the same position (A at 0 and 5, B at 1 and 4, C at 2 and 3: 2.5 each), so a host that
warms up or a neighbour that starts a job lands on every arm alike, as the interleaved order did. The
false-winner rate and power of this schedule against the interleaved one, under noise, drift and a
per-restart offset, are simulated by tools/tune_schedule_sim.py (docs/tune.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_BLOCKS = 2


@dataclass(frozen=True)
class Run:
    """Repeats of one arm in a row: one switch (none when the arm already runs), then `repeats` repeats."""

    arm: str
    repeats: int
    block: int  # which block of the schedule it starts (0-based), for the journal's round


def block_sizes(repeats: int, blocks: int) -> list[int]:
    """`repeats` split over `blocks` as evenly as possible, larger blocks first; no empty block."""
    blocks = max(1, min(blocks, repeats))
    base, extra = divmod(repeats, blocks)
    return [base + (1 if i < extra else 0) for i in range(blocks)]


def mirrored(arms: Sequence[str], repeats: int, blocks: int = DEFAULT_BLOCKS) -> list[Run]:
    """The schedule (module docstring), neighbouring blocks of one arm merged into one run."""
    if len(set(arms)) != len(arms):
        raise ValueError("arms must be distinct")
    if repeats < 1 or not arms:
        return []
    runs: list[Run] = []
    for k, size in enumerate(block_sizes(repeats, blocks)):
        for arm in (arms if k % 2 == 0 else list(reversed(arms))):
            if runs and runs[-1].arm == arm:
                runs[-1] = Run(arm, runs[-1].repeats + size, runs[-1].block)
            else:
                runs.append(Run(arm, size, k))
    return runs


def switches(runs: Sequence[Run], running: str | None = None) -> int:
    """Switches the schedule makes: one per run, less the first when its arm is already running."""
    return len(runs) - (1 if runs and runs[0].arm == running else 0)


def cost_s(runs: Sequence[Run], switch_s: float, repeat_s: float, running: str | None = None) -> float:
    """What the schedule takes: its switches and all its repeats."""
    return switches(runs, running) * switch_s + sum(r.repeats for r in runs) * repeat_s


def remaining(runs: Sequence[Run], done: dict[str, int]) -> list[Run]:
    """The runs still to measure when `done` repeats of each arm are journalled already (a resumed tune):
    each arm's done repeats are taken from its earliest runs."""
    left = dict(done)
    out: list[Run] = []
    for r in runs:
        take = min(r.repeats, left.get(r.arm, 0))
        left[r.arm] = left.get(r.arm, 0) - take
        if r.repeats - take > 0:
            out.append(Run(r.arm, r.repeats - take, r.block))
    return out
