"""Where production ends after a tune: back on the plan the tune started from (`restore`), on the winner
(`--apply`), the winner rolled through a fleet (`--fleet`); and the summary a person reads (`finish`).

`restore` is checked on /status: a switch the tune sent before it was stopped may still run, and finish
after ours, so it tries again (RESTORE_ATTEMPTS) and says when it cannot.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bench.tune import adaptive, space
from bench.tune.result import TUNE_JSON, TUNE_PNG, winner_of
from bench.tune.runner import TuneRun
from bench.tune.space import Candidate
from launcher.errors import KitError, RuntimeFailure
from launcher.fleet import fleetfile, rolling
from launcher.profiles.spec_params import coerce
from launcher.runtime.control_client import ControlClient, SyncControlClient
from launcher.runtime.states import ANSWERING, OK_OUTCOMES

RESTORE_ATTEMPTS = 3


def restore(run: TuneRun) -> None:
    """Production back on the plan the tune started from (when a switch left it), checked on /status:
    a switch the tune sent before it was stopped may still run, and finish after ours; says when it cannot."""
    if not run.switched or not run.start_plan.get("name"):
        return
    plan = run.start_plan
    label = space.Candidate.of_plan(plan).label

    async def back() -> str | None:
        async with ControlClient(run.s.control, run.token, run.s.connect_timeout) as client:
            why = "no attempt"
            for _ in range(RESTORE_ATTEMPTS):
                status = await client.wait_idle(run.s.switch_timeout)
                if (status.get("profile"), status.get("spec"), status.get("digest")) == (
                        plan.get("name"), plan.get("spec"), plan.get("digest")) and status.get("state") in ANSWERING:
                    return None
                code, body = await client.switch_when_idle(str(plan["name"]), str(plan["spec"]), run.s.switch_timeout,
                                                           spec_params=plan.get("spec_params"),
                                                           adaptive_tiers=plan.get("adaptive_tiers") or None)
                why = f"HTTP {code} {body.get('outcome')}: {body.get('error')}"
                if body.get("outcome") not in OK_OUTCOMES:
                    return why
            return why

    try:
        failure = asyncio.run(back())
    except RuntimeFailure as exc:
        failure = str(exc)
    if failure is None:
        run.console.print(f"production back on {label}")
        run.switched = False
    else:
        run.console.print(f"could not put production back on {label} ({failure}); switch it by hand "
                          "(launcher switch / POST /switch)", style="bold red")


def finish(run: TuneRun, path: Path) -> int:
    """Production as promised (back, --apply, --fleet) and the summary for a person; the exit code."""
    data = json.loads((path / TUNE_JSON).read_text(encoding="utf-8"))
    say = run.console.print
    prefix = "SIMULATED " if run.simulated else ""
    for cell in data["cells"]:
        if cell["status"] == "invalid":
            say(f"{prefix}{cell['label']}: WRONG: {cell['reason']} (never chosen)", style="bold red")
    d = data["decision"]
    winner = winner_of(run)
    if winner is not None:
        say(f"{prefix}{run.decision.summary() if run.decision else winner.label}", style="bold green")
        say(f"  rule: {d['rule']}")
        for comp in d.get("comparisons", []):
            say(f"  {comp['contender']} vs {comp['role']} {comp['other']}: {comp['diff_mean']:+.2f} (95% CI {comp['ci_low']:+.2f}.."
                f"{comp['ci_high']:+.2f}, n={comp['n_contender']}/{comp['n_other']})")
    else:
        say(f"{prefix}{run.decision.summary() if run.decision else d['outcome'] + ': ' + str(d.get('chosen')) + ' stays'}")
    if data.get("adaptive"):
        for line in adaptive.summary_lines(data["adaptive"], winner.label if winner else None):
            say(f"{prefix}{line}")
    rc = 0
    if run.s.apply and winner is not None:
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
    if data.get("profile_file"):
        print(f"{prefix}profile: {data['profile_file']}")
    return rc


def chosen_digest(run: TuneRun, winner: Candidate) -> str | None:
    """The digest of the plan the winner's cells ran (their journal lines), else the one POST /check gave."""
    ran = [e.plan_digest for e in run.cells.entries_of(winner.label) if e.status == "ok" and e.plan_digest]
    return ran[-1] if ran else run.plan_digests.get(winner.label)


def apply(run: TuneRun, winner: Candidate, data: dict[str, Any]) -> int:
    """Production on exactly the plan the tune chose, checked by digest: by the written profile's name when the
    server reads it and runs the same plan under it (else an older file of that name would run), else the
    winner's own profile and point. A switch that fails or runs another plan puts production back on the
    plan the tune started from, naming both."""
    client = SyncControlClient(run.s.control, run.token, run.s.connect_timeout)
    want = chosen_digest(run, winner)
    profile, params, tiers, what = winner.profile, winner.point_json(), winner.tiers_json(), winner.label
    names = [p.get("name") for p in client.profiles()]
    if run.s.profile_name in names and data.get("profile_file"):
        code, body = client.check(run.s.profile_name, winner.spec)
        if code == 200 and want is not None and body.get("digest") == want:
            profile, params, tiers = run.s.profile_name, None, None  # the file's [adaptive_tiers], if any
            what = f"profile {run.s.profile_name} ({data['profile_file']}) + {winner.spec}"
        else:
            got = body.get("digest") or f"HTTP {code}: {body.get('error')}"
            run.console.print(f"--apply: the server's profile {run.s.profile_name} is not the plan the tune chose "
                              f"({got} against {winner.label}'s {want}: an older file of that name?); applying "
                              f"{winner.label} itself", style="yellow")
    code, body = client.switch(profile, winner.spec, run.s.switch_timeout, spec_params=params, adaptive_tiers=tiers)
    to = body.get("to")
    ran = (to.get("digest") if isinstance(to, dict) else None) or client.status().get("digest")
    if body.get("outcome") in OK_OUTCOMES and (want is None or ran == want):
        run.console.print(f"applied: production runs {what}")
        run.switched = False
        return 0
    why = (f"HTTP {code} {body.get('outcome')}: {body.get('error')}" if body.get("outcome") not in OK_OUTCOMES
           else f"it runs digest {ran}, not the chosen {want}")
    start = space.Candidate.of_plan(run.start_plan).label
    run.console.print(f"--apply: the switch to {what} did not take ({why}); putting production "
                      f"back on {start}, the plan the tune started from", style="bold red")
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
                              spec_params=coerce(winner.point_json()), adaptive_tiers=winner.tiers, say=lambda t: run.console.print(t))
    except KitError as exc:  # the fleet file, a token, a host: said, and the tune's own results stand
        run.console.print(f"--fleet: {exc}", style="bold red")
        return 1
