"""What a switch and a repeat cost a tune, as measured so far: the planner's inputs (bench/tune/order.py)
and tune.json's timings."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Timing:
    """What a switch and a repeat cost, as measured so far (the planner's inputs): the mean of every switch
    that restarted the server (switch, health gate and warm-up), and of every repeat (all concurrency levels).
    Before the first switch, the last switch /status history records, if any."""

    switch_s: float | None = None
    repeat_s: float | None = None
    cells: list[dict[str, float]] = field(default_factory=list)  # per measured cell: wall, switch, measure
    switches: list[float] = field(default_factory=list)
    repeats: list[float] = field(default_factory=list)

    def observe(self, wall: float, measured: float, switched: bool, repeats: int) -> None:
        self.cells.append({"wall_s": wall, "measure_s": measured, "switch_s": wall - measured if switched else 0.0})
        if switched:
            self.switches.append(max(0.0, wall - measured))
            self.switch_s = statistics.fmean(self.switches)
        if repeats:
            self.repeats += [measured / repeats] * repeats
            self.repeat_s = statistics.fmean(self.repeats)
