"""A switch cut short (its journal left by a control API or container restart), resolved at start-up: the plan
that runs now is gated and committed when healthy, else the last committed plan is brought back. What it
leaves is returned; Lifecycle.recover moves the state and records the history entry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from launcher.profiles.plan import Plan
from launcher.runtime.core import transitions
from launcher.runtime.core.decisions import has_other_good
from launcher.runtime.core.failures import GateFailed, describe
from launcher.runtime.core.states import Outcome, Resolution
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.runtime.records import journal
from launcher.runtime.records import state as runtime_state
from launcher.runtime.records.history import Entry
from launcher.runtime.switch import Switcher, label


@dataclass(frozen=True)
class Recovered:
    """What a recovery leaves: how it resolved (with the state that follows), the plan that runs, the committed
    plan, and the error /status shows."""

    done: transitions.Resolved
    current: Plan | None
    last_good: Plan | None
    error: str | None


def interrupted_entry(j: journal.Journal) -> Entry:
    """The history entry of the switch `j` records, outcome `interrupted`, before it is resolved."""
    rec = j.record()
    why = j.cut_short or "control API or container restart"
    entry = Entry(id=j.id, **{"from": rec["from"]}, to=rec["to"], outcome=Outcome.INTERRUPTED,
                  interrupted_phase=j.phase_text(),
                  error=f"the switch was cut short in phase '{j.phase_text()}' ({why})")
    if j.phase == journal.DONE:  # it finished, but its outcome could not be written then
        entry.finished_as, entry.error = j.finished_as, "the switch finished but its outcome could not be recorded"
    return entry


async def resolve(entry: Entry, sd: Path, sup: Supervisor, switcher: Switcher, current: Plan | None,
                  last_good: Plan | None) -> Recovered:
    """Gate the rendered plan (started first when supervisord does not run it) and commit it when it answers;
    else fall back (fall_back). `entry` gets the resolution, the plan left running and the errors."""
    rendered = runtime_state.rendered_plan(sd)
    try:
        if rendered is None:
            raise GateFailed("no readable rendered plan (profile.json)")
        switcher.active = rendered
        info = await asyncio.to_thread(sup.info)
        if transitions.recovery_needs_start(info.get("statename")):
            await switcher.start_program()
        await switcher.health_gate(rendered.server_url, switcher.timeouts.health_s)
        runtime_state.commit(sd, rendered)
        done = transitions.recovery_kept()
        entry.resolution, entry.running = done.resolution, label(rendered)
        return Recovered(done, rendered, rendered, None)
    except Exception as exc:
        entry.gate_error = describe(exc)
    return await fall_back(entry, switcher, current, last_good, rendered)


async def fall_back(entry: Entry, switcher: Switcher, current: Plan | None, good: Plan | None,
                    rendered: Plan | None) -> Recovered:
    """The running plan failed its gate: roll back to the committed plan when it is another one, else `failed`
    with nothing changed."""
    other = has_other_good(None if good is None else good.digest(), None if rendered is None else rendered.digest())
    done = transitions.recovery_after_gate_failed(other)
    if done is not None:
        entry.resolution = done.resolution
        return Recovered(done, current, good, entry.gate_error)
    entry.rolled_back(await switcher.roll_back(good, None))
    done = transitions.recovery_after_rollback(entry.outcome == Outcome.ROLLED_BACK)
    entry.outcome, entry.resolution, entry.running = Outcome.INTERRUPTED, done.resolution, label(good)
    error = entry.gate_error if done.resolution == Resolution.ROLLED_BACK else entry.rollback_error
    return Recovered(done, good, good, error)
