"""The final comparison's schedule: blocks of repeats, one switch per block, in a mirrored order.

On the target a switch reloads the model (minutes), so one switch per repeat (A B C A B C …, 8 rounds:
24 switches for two finalists and the running plan) costs hours. Here every arm gets `blocks` blocks of
its repeats and the passes run forward, then backward, then forward …:

    blocks=4, arms A B C, 8 repeats each:   AA BB CC | CC BB AA | AA BB CC | CC BB AA
                                            pass 1     pass 2     pass 3     pass 4

Neighbouring blocks of one arm (CC CC, AA AA) run without a switch between them, so 3 arms cost 9
switches instead of 24 (blocks=2: 5). Mirroring balances drift: under a drift linear in time every
arm's repeats sit, on average, at the same point, so a host that warms up lands on every arm alike.

What blocks cannot balance is noise that comes in bursts (a neighbour's job for a minute): a block absorbs
it whole. So the decision (bench/tune/decision.py) resamples runs, then their repeats, never the repeats of
a run as if independent, and a schedule with few runs per arm pays for its few switches in power, not in
false winners. tools/tune_schedule_sim.py simulates both, with and without bursts (docs/tune.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_BLOCKS = 4


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
