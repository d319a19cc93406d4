"""Where production ends after a tune: back on the plan the tune started from (`restore`), on the winner
(`--apply`), the winner rolled through a fleet (`--fleet`); and the summary a person reads (`finish`).

Never on a plan the tune measured WRONG: when the running plan FAILed the gate, the decision is
`running_plan_wrong` and production goes to the plan it chose (the fastest correct finalist, else baseline),
with or without --apply (exit 3); a tune stopped before deciding goes to the gate's reference (baseline under
the running plan's spec mode) rather than back. Putting a plan on is bench/control/production.py's `put_on`, checked on
/status.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.control import production
from bench.control.production import PlanRef
from bench.tune import adaptive
from bench.tune.decision import RUNNING_PLAN_WRONG
from bench.tune.ledger import reference_label
from bench.tune.result import TUNE_JSON, TUNE_PNG, winner_of
from bench.tune.runner import TuneRun
from bench.tune.space import Candidate
from bench.tune.tune_file import TuneFile
from launcher.errors import KitError
from launcher.fleet import fleetfile, rolling
from launcher.runtime.api.control_client import SyncControlClient
from launcher.runtime.core.states import OK_OUTCOMES

START_WRONG = 3  # the exit code of a tune whose running plan FAILed the gate, production moved off it


def start_wrong(run: TuneRun) -> bool:
    """Whether the plan the tune started from FAILed the gate in this tune."""
    return run.incumbent is not None and run.cells.wrong(run.incumbent.label)


def back_plan(run: TuneRun) -> PlanRef:
    """Where production goes back to: the plan the tune started from, or, when the tune measured it WRONG, the
    gate's reference under its spec mode (the digest its cells ran, when they ran)."""
    if not start_wrong(run):
        return run.start_plan
    ref = Candidate.parse(reference_label(str(run.start_plan.spec)))
    return production.plan_ref(ref.profile, ref.spec, digest=chosen_digest(run, ref))


def restore(run: TuneRun) -> None:
    """Production back on `back_plan` (when a switch left the plan the tune started from, or that plan is WRONG),
    checked on /status; says when it cannot, with the command that does it."""
    wrong = start_wrong(run)
    if (not run.switched and not wrong) or not run.start_plan.name:
        return
    plan = back_plan(run)
    label = production.label_of(plan)
    if wrong:
        run.console.print(f"the plan the tune started from, {production.label_of(run.start_plan)}, FAILed the "
                          f"correctness gate: production goes to {label}, the gate's reference, not back to it",
                          style="bold red", soft_wrap=True)
    s = run.s
    failure, now = production.put_back(s.control, run.token, s.connect_timeout, s.switch_timeout, plan)
    if failure is None:
        run.console.print(f"production {'now' if wrong else 'back'} on {label}")
        run.switched = False
    else:
        run.switched = True
        run.console.print(f"could not put production on {label} ({failure}); production now runs {now}; put it "
                          f"there with: {production.switch_command(plan, s.control)}", style="bold red", soft_wrap=True)


def finish(run: TuneRun, path: Path) -> int:
    """Production as promised (back, --apply, --fleet) and the summary for a person; the exit code."""
    data = TuneFile.read(json.loads((path / TUNE_JSON).read_text(encoding="utf-8")))
    say = run.console.print
    prefix = "SIMULATED " if run.simulated else ""
    for cell in data.cells:
        if cell.status == "invalid":
            say(f"{prefix}{cell.label}: WRONG: {cell.reason} (never chosen)", style="bold red")
    d = data.decision
    winner = winner_of(run)
    if winner is not None:
        say(f"{prefix}{run.decision.summary() if run.decision else winner.label}", style="bold green")
        say(f"  rule: {d.rule}")
        for comp in d.comparisons:
            say(f"  {comp['contender']} vs {comp['role']} {comp['other']}: {comp['diff_mean']:+.2f} (95% CI {comp['ci_low']:+.2f}.."
                f"{comp['ci_high']:+.2f}, n={comp['n_contender']}/{comp['n_other']})")
    else:
        say(f"{prefix}{run.decision.summary() if run.decision else str(d.outcome) + ': ' + str(d.chosen) + ' stays'}")
    if data.adaptive:
        for line in adaptive.summary_lines(data.adaptive, winner.label if winner else None):
            say(f"{prefix}{line}")
    rc = 0
    wrong = d.outcome == RUNNING_PLAN_WRONG
    if wrong and winner is not None:
        say(f"{prefix}the running plan {d.incumbent} FAILed the correctness gate: production goes to "
            f"{winner.label}{'' if run.s.apply else ' although --apply was not given'}, never back to it (exit "
            f"{START_WRONG})", style="bold red", soft_wrap=True)
        rc = apply(run, winner, data) or START_WRONG
    elif run.s.apply and winner is not None:
        rc = apply(run, winner, data)
    else:
        if run.s.apply:
            say("--apply: no winner, so nothing to apply; production goes back to the plan it started with")
        restore(run)
        if run.switched:
            rc = 1
    if run.s.fleet and winner is not None:
        rc = roll(run, winner) or rc
    print(f"{prefix}tune: {path / TUNE_JSON}")
    print(f"{prefix}plot: {path / TUNE_PNG}")
    if data.profile_file:
        print(f"{prefix}profile: {data.profile_file}")
    return rc


def chosen_digest(run: TuneRun, winner: Candidate) -> str | None:
    """The digest of the plan the winner's cells ran (their journal lines), else the one POST /check gave."""
    ran = [e.plan_digest for e in run.cells.entries_of(winner.label) if e.status == "ok" and e.plan_digest]
    return ran[-1] if ran else run.plan_digests.get(winner.label)


def apply(run: TuneRun, winner: Candidate, data: TuneFile) -> int:
    """Production on exactly the plan the tune chose, checked by digest: by the written profile's name when the
    server reads it and runs the same plan under it (else an older file of that name would run), else the
    winner's own profile and point. A switch that fails or runs another plan puts production back on the
    plan the tune started from, naming both."""
    client = SyncControlClient(run.s.control, run.token, run.s.connect_timeout)
    want = chosen_digest(run, winner)
    profile, params, tiers, what = winner.profile, winner.switch_point(), winner.tiers_json(), winner.label
    names = [p.name for p in client.profiles()]
    if run.s.profile_name in names and data.profile_file:
        checked = client.check(run.s.profile_name, winner.spec)
        if checked.ok and want is not None and checked.digest == want:
            profile, params, tiers = run.s.profile_name, None, None  # the file's [adaptive_tiers], if any
            what = f"profile {run.s.profile_name} ({data.profile_file}) + {winner.spec}"
        else:
            got = checked.digest or f"HTTP {checked.code}: {checked.error}"
            run.console.print(f"--apply: the server's profile {run.s.profile_name} is not the plan the tune chose "
                              f"({got} against {winner.label}'s {want}: an older file of that name?); applying "
                              f"{winner.label} itself", style="yellow")
    answer = client.switch(profile, winner.spec, run.s.switch_timeout, spec_params=params, adaptive_tiers=tiers)
    to = answer.entry.to if answer.entry else None
    ran = (to.digest if to else None) or client.status().digest
    if answer.outcome in OK_OUTCOMES and (want is None or ran == want):
        run.console.print(f"applied: production runs {what}")
        run.switched = False
        return 0
    why = (f"HTTP {answer.code} {answer.outcome}: {answer.error}" if answer.outcome not in OK_OUTCOMES
           else f"it runs digest {ran}, not the chosen {want}")
    back = production.label_of(back_plan(run))
    run.console.print(f"--apply: the switch to {what} did not take ({why}); putting production "
                      f"on {back}", style="bold red")
    run.switched = True
    restore(run)
    return 1


def roll(run: TuneRun, winner: Candidate) -> int:
    """--fleet: the winner's plan (profile, spec, point or tuned adaptive tiers) through every host of the
    fleet, one at a time (launcher/fleet/rolling.py)."""
    fleet = fleetfile.load(run.s.fleet or "")
    history = rolling.default_history(Path(run.s.fleet or ""))
    try:
        return rolling.switch(fleet, winner.profile, winner.spec, history, timeout_s=run.s.switch_timeout,
                              spec_params=winner.switch_point(), adaptive_tiers=winner.tiers, say=lambda t: run.console.print(t))
    except KitError as exc:  # the fleet file, a token, a host: said, and the tune's own results stand
        run.console.print(f"--fleet: {exc}", style="bold red")
        return 1
