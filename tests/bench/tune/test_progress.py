"""bench/tune/progress.py: the ETA is the planned work left, never past the budget."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from bench.tune.progress import TuneProgress


def clocks(text: str) -> list[int]:
    return [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in re.findall(r"(\d+):(\d\d):(\d\d)", text)]


def test_eta_is_the_plan_capped_by_the_budget_left():
    console = Console(file=io.StringIO(), force_terminal=False)
    with TuneProgress(console, budget_s=100.0, t0=time.monotonic() - 40) as p:
        text = p.eta_text()
        assert text.startswith("ETA ?") and 55 <= clocks(text)[0] <= 60  # nothing planned yet
        p.plan(30.0)
        eta, left = clocks(p.eta_text())
        assert 25 <= eta <= 30 and 55 <= left <= 60
        p.plan(500.0)  # more work than time: the budget ends it
        eta, left = clocks(p.eta_text())
        assert eta == left and 55 <= left <= 60
        p.cell("fused+eagle3(1,1,2)", "switching", "screen", 1)
        p.phase("measuring")
        assert p.progress.tasks[0].description == "fused+eagle3(1,1,2) (screen r1): measuring"
        assert 39 <= p.progress.tasks[0].completed <= 100
