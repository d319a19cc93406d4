"""The tune's progress bar: the cell, its phase (switching, warming up, measuring), the elapsed time,
and the ETA within the budget (the planner's estimate of the work left, never past the budget)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class _EtaColumn(ProgressColumn):
    """`ETA 0:03:10 of budget 0:20:00 left`: the planned work left, capped by the budget left."""

    def __init__(self, owner: TuneProgress):
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> Text:
        return Text(self.owner.eta_text(), style="progress.remaining")


class TuneProgress:
    """Use as a context manager; `cell()` names what runs, `plan()` sets the estimate of the work left."""

    def __init__(self, console: Console, budget_s: float, t0: float | None = None):
        self.budget_s = budget_s
        self.t0 = time.monotonic() if t0 is None else t0
        self.planned_s: float | None = None
        self.planned_at = self.t0
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                 TimeElapsedColumn(), _EtaColumn(self), console=console, transient=True)
        self.task: Any = None
        self.where = ""

    def __enter__(self) -> TuneProgress:
        self.progress.__enter__()
        self.task = self.progress.add_task("starting", total=self.budget_s)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def eta_text(self) -> str:
        left = self.budget_s - self.elapsed()
        if self.planned_s is None:
            return f"ETA ? (budget {_clock(left)} left)"
        eta = min(left, max(0.0, self.planned_s - (time.monotonic() - self.planned_at)))
        return f"ETA {_clock(eta)} (budget {_clock(left)} left)"

    def plan(self, work_left_s: float) -> None:
        self.planned_s, self.planned_at = work_left_s, time.monotonic()
        self._tick()

    def cell(self, label: str, what: str, phase: str, rnd: int = 0) -> None:
        self.where = f"{label} ({phase} r{rnd})" if phase == "screen" else f"{label} ({phase})"
        self.phase(what)

    def phase(self, what: str) -> None:
        """switching, warming up, measuring: what the cell named by `cell` is doing now."""
        self.progress.update(self.task, description=f"{self.where}: {what}")
        self._tick()

    def _tick(self) -> None:
        self.progress.update(self.task, completed=min(self.budget_s, self.elapsed()))
