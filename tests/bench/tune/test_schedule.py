"""bench/tune/schedule.py: the final's mirrored blocks, their switches and cost, and a resumed final."""

from __future__ import annotations

import pytest

from bench.tune.schedule import Run, block_sizes, cost_s, mirrored, remaining, switches


def test_block_sizes_split_evenly_and_never_empty():
    assert block_sizes(8, 2) == [4, 4]
    assert block_sizes(7, 2) == [4, 3]
    assert block_sizes(2, 5) == [1, 1]
    assert block_sizes(5, 1) == [5]


def test_mirrored_blocks_merge_neighbours_and_balance_linear_drift():
    four = mirrored(["A", "B", "C"], 8)  # the default: 4 blocks
    assert [(r.arm, r.repeats) for r in four] == [("A", 2), ("B", 2), ("C", 4), ("B", 2), ("A", 4), ("B", 2),
                                                  ("C", 4), ("B", 2), ("A", 2)]
    assert switches(four) == 9
    runs = mirrored(["A", "B", "C"], 8, 2)
    assert [(r.arm, r.repeats) for r in runs] == [("A", 4), ("B", 4), ("C", 8), ("B", 4), ("A", 4)]
    assert switches(runs) == 5 and switches(runs, running="A") == 4
    # every arm's repeats sit, on average, at the same place in time: a linear drift lands on each alike
    slots, t = {}, 0
    for r in runs:
        slots.setdefault(r.arm, []).extend(range(t, t + r.repeats))
        t += r.repeats
    centres = {arm: sum(v) / len(v) for arm, v in slots.items()}
    assert len(set(centres.values())) == 1, centres
    assert sum(r.repeats for r in runs) == 24


def test_three_blocks_and_the_cost():
    runs = mirrored(["A", "B"], 6, 3)
    assert [(r.arm, r.repeats, r.block) for r in runs] == [("A", 2, 0), ("B", 4, 0), ("A", 4, 1), ("B", 2, 2)]
    assert cost_s(runs, switch_s=300, repeat_s=60) == 4 * 300 + 12 * 60
    with pytest.raises(ValueError):
        mirrored(["A", "A"], 4)
    assert mirrored(["A", "B"], 0) == []


def test_a_resumed_final_runs_only_what_is_left():
    runs = mirrored(["A", "B", "C"], 8, 2)
    left = remaining(runs, {"A": 4, "B": 5})
    assert left == [Run("C", 8, 0), Run("B", 3, 1), Run("A", 4, 1)]
    assert remaining(runs, {"A": 8, "B": 8, "C": 8}) == []
