"""Where production ends after a `bench run` that switched it: back on the plan it found running, or on the
`--leave-on` cell when that cell passed the correctness gate; never on a plan this run's gate called WRONG.

The rule, on success, failure and interrupt alike (`target`):
- `--leave-on CELL`, the run whole, and CELL valid and PASS: production stays on CELL's plan (checked by digest);
- otherwise the plan found running, unless a cell of this run that ran that very plan (same digest) FAILed the
  gate: then baseline under that plan's spec mode, the gate's own reference, and never the wrong plan.

Exit codes it adds: 2 for a `--leave-on` cell that did not pass (production goes back to the plan found running),
3 when the plan found running was called WRONG (production went to baseline), 1 when production could not be put
where it belongs (naming what runs now and the command that puts it there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bench.bundle.schema import Cell
from bench.control import production
from bench.control.production import PlanRef
from bench.run import correctness, logprob_gate
from bench.run.cell import reference_key
from bench.run.settings import RunSettings

LEAVE_ON_REFUSED = 2
START_WRONG = 3


@dataclass(frozen=True)
class Target:
    plan: PlanRef
    what: str  # how the plan is named when production lands there
    verb: str  # "back on", "left on", "now on"
    rc: int = 0  # the exit code this choice adds (LEAVE_ON_REFUSED, START_WRONG), 0 when none
    note: str = ""  # said before the switch, in red when rc is not 0


def plan_of_cell(cell: Cell) -> PlanRef:
    return production.plan_ref(cell.profile, cell.spec, cell.spec_params, digest=cell.plan_digest)


def wrong_cell(cells: Mapping[str, Cell], plan: PlanRef) -> Cell | None:
    """A cell of this run that ran `plan` itself (same digest) and FAILed the gate."""
    digest = plan.digest
    return next((c for c in cells.values() if digest and c.plan_digest == digest
                 and c.correctness.status == logprob_gate.FAIL), None)


def target(start: PlanRef, cells: Mapping[str, Cell], leave_on: str | None, whole: bool) -> Target:
    """Where production goes (module docstring). `start`: the plan found running."""
    note = ""
    rc = 0
    if leave_on is not None:
        cell = next((c for c in cells.values() if c.label == leave_on), None)
        if whole and cell is not None and cell.valid and cell.correctness.status == logprob_gate.PASS:
            return Target(plan_of_cell(cell), f"{cell.label} (--leave-on; it passed the correctness gate)", "left on")
        if not whole:
            note = f"--leave-on {leave_on}: the run did not finish, so no cell is left on"
        else:
            status = "never measured" if cell is None else (
                f"INVALID ({cell.invalid_reason})" if not cell.valid else
                f"{cell.correctness.status}: {'; '.join(cell.correctness.reasons) or 'no reason given'}")
            note = f"--leave-on {leave_on}: only a cell that passed the correctness gate is left on, and it is {status}"
            rc = LEAVE_ON_REFUSED
    start_label = production.label_of(start)
    wrong = wrong_cell(cells, start)
    if wrong is None:
        return Target(start, f"{start_label}, the plan it found", "back on", rc, note)
    ref = cells.get(reference_key(cells, wrong))
    ref_plan = plan_of_cell(ref) if ref is not None and ref.valid else production.plan_ref(correctness.BASELINE,
                                                                                            str(start.spec))
    why = "; ".join(wrong.correctness.reasons) or wrong.correctness.status or "FAIL"
    note = (f"{note}; " if note else "") + (
        f"the plan production ran when this bench started, {start_label}, FAILed the correctness gate in this run "
        f"({wrong.label}: {why}): production goes to {production.label_of(ref_plan)}, the gate's reference, not back "
        "to a plan called WRONG")
    return Target(ref_plan, f"{production.label_of(ref_plan)} (the gate's reference)", "now on", rc or START_WRONG,
                  note)


@dataclass
class Landing:
    """Puts production where `target` says once the run has ended, and says where it is."""

    settings: RunSettings
    token: str | None
    start: PlanRef  # the plan found running before the first switch
    say: Callable[..., None]

    def land(self, cells: Mapping[str, Cell], whole: bool) -> int:
        """Production on its target; the exit code this adds (0, 2, 3), 1 when it could not be put there, 130 when
        a second interrupt stopped it."""
        t = target(self.start, cells, self.settings.leave_on, whole)
        if t.note:
            self.say(t.note, style="bold red" if t.rc else "yellow")
        s = self.settings
        assert s.control is not None
        try:
            why, now = production.put_back(s.control, self.token, s.connect_timeout, s.switch_timeout, t.plan)
        except KeyboardInterrupt:
            self.say(f"interrupted while putting production on {t.what}: see `launcher status`; put it there with: "
                     f"{production.switch_command(t.plan, s.control)}", style="bold red")
            return 130
        if why is None:
            self.say(f"production {t.verb} {t.what}",
                     style="bold red" if t.rc == START_WRONG else None)
            return t.rc
        self.say(f"could not put production on {t.what} ({why}); production now runs {now}; put it there with: "
                 f"{production.switch_command(t.plan, s.control)}", style="bold red")
        return 1
