"""The rolling switch: one host at a time, never in the router while its server is being stopped.

For each host: take it out of the router (and wait until the router no longer lists it), switch it
through its control API (drain, restart, health gate, backend check; rollback on failure), put it
back, and wait until the router reports it healthy. The first host that fails stops the run: it has
rolled back (its control API did that) and, if it serves again, goes back into the router; the hosts
not reached yet are left as they were. Every step is a line in the fleet history.

Nothing waits without end: each host's switch request has a total deadline (`--timeout`, else the
switch's own worst case, control_client.switch_deadline_s). When it passes, or SIGINT/SIGTERM arrives
(the CLI turns both into Interrupted), the host taken out goes back into the router if its /status
says it answers, and the history records why the run stopped.

A switch may carry an EAGLE-3 point (`spec_params`) or, under eagle3-adaptive, a tuned adaptive config
(`adaptive_tiers`, launcher/profiles/adaptive_tiers.py): every host is switched to it, and a host on the
target profile and spec counts as already there only when its running plan (GET /plan) runs that point and
those tiers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher import atomic
from launcher.errors import RuntimeFailure, UserError
from launcher.fleet.fleetfile import Fleet, Host, require_tokens
from launcher.fleet.router import RouterClient
from launcher.profiles import adaptive_tiers as tiers_mod
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.plan import Plan
from launcher.profiles.spec_params import SpecParams, point_problems
from launcher.profiles.spec_params import label as plan_label
from launcher.runtime.api.control_client import SyncControlClient, switch_deadline_s
from launcher.runtime.core.states import ANSWERING, OK_OUTCOMES, Outcome, State


@dataclass(frozen=True)
class Target:
    """The plan every host is switched to: profile + spec, with an EAGLE-3 point or tuned adaptive tiers."""

    profile: str
    spec: str
    point: SpecParams | None = None
    tiers: AdaptiveTiers | None = None

    def problems(self) -> list[str]:
        """What makes the target one no host should be sent (empty: none), found before any host is touched."""
        out = [f"spec_params {p}" for p in (point_problems(self.point) if self.point is not None else [])]
        if self.tiers is not None and self.spec != tiers_mod.SPEC_MODE:
            out.append(f"{tiers_mod.FIELD} {self.tiers.label()} apply under spec mode {tiers_mod.SPEC_MODE} only, "
                       f"not {self.spec}: give --spec {tiers_mod.SPEC_MODE}")
        return out

    def label(self) -> str:
        """`fused+eagle3(1,1,2)`, `fused+eagle3-adaptive[1:3,4:1,16:0]`."""
        return plan_label(self.profile, self.spec, self.point) + (self.tiers.label() if self.tiers else "")

    def record(self) -> dict[str, object]:
        """What every line of the fleet history carries about the target."""
        return {"profile": self.profile, "spec": self.spec,
                "spec_params": self.point.model_dump() if self.point is not None else None,
                "adaptive_tiers": self.tiers.to_json() if self.tiers is not None else None}

    def run_by(self, plan: Plan | None) -> bool:
        """Whether a running plan (GET /plan) on this profile + spec runs the point and the tiers asked for;
        none asked for: any will do."""
        return (plan is not None and (plan.name, plan.spec) == (self.profile, self.spec)
                and (self.point is None or plan.spec_params == self.point)
                and (self.tiers is None or plan.adaptive_tiers == self.tiers))


class History:
    """Append-only JSON lines next to the fleet file; each line stands alone (a crash loses nothing
    written before it)."""

    def __init__(self, path: Path, run: str, target: dict[str, object]):
        self.path, self.run, self.target = path, run, target

    def step(self, host: str | None, step: str, **detail: object) -> None:
        entry = {"at": time.time(), "run": self.run, "host": host, "step": step, **self.target, **detail}
        atomic.append_line(self.path, json.dumps(entry, sort_keys=True))


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a rolling switch (raised by the CLI's handler): put back what was taken out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.restoring = False  # raised while a host was being put back


def default_history(fleet_file: Path) -> Path:
    return fleet_file.with_name(f"{fleet_file.stem}.history.jsonl")


def switch(
    fleet: Fleet,
    profile: str,
    spec: str,
    history: Path,
    *,
    timeout_s: float | None = None,
    add_timeout_s: float = 120.0,
    say: Callable[[str], None] = print,
    spec_params: SpecParams | None = None,
    adaptive_tiers: AdaptiveTiers | None = None,
) -> int:
    """0 when every host ends on the new plan; 1 at the first host that does not (named, with why).

    `timeout_s` is each host's health-gate timeout and the total wait for its switch request; without
    it the wait is the switch's own worst case. `spec_params`: an EAGLE-3 point sent with every host's
    switch (None: the spec overlay's own, and a host on profile + spec counts as there whatever point it
    runs); `adaptive_tiers` likewise, under eagle3-adaptive only. A point SGLang would not run as given
    (spec_params.point_problems) or tiers under another spec mode is a UserError before any host is
    touched. Interrupted propagates after the host is put back."""
    target = Target(profile, spec, spec_params, adaptive_tiers)
    problems = target.problems()
    if problems:
        raise UserError("; ".join(problems))
    require_tokens(fleet)
    log = History(history, run=f"{int(time.time())}", target=target.record())
    log.step(None, "begin", hosts=[h.name for h in fleet.host])
    with RouterClient(fleet.router.url) as router:
        router.workers()  # the router must answer before any host is touched
        for host in fleet.host:
            left = [h.name for h in fleet.host[fleet.host.index(host) + 1 :]]
            try:
                rc = _one(host, target, router, log, timeout_s, add_timeout_s, say)
            except Interrupted as exc:
                log.step(None, "stopped", interrupted_host=host.name, signal=exc.signum, untouched=left)
                if left:
                    say(f"stopped: {', '.join(left)} left on their current plan")
                raise
            if rc:
                log.step(None, "stopped", failed_host=host.name, untouched=left)
                if left:
                    say(f"stopped: {', '.join(left)} left on their current plan")
                return rc
    log.step(None, "done")
    say(f"fleet on {target.label()}: {len(fleet.host)} host(s)")
    return 0


def _one(host: Host, target: Target, router: RouterClient, log: History,
         timeout_s: float | None, add_timeout_s: float, say: Callable[[str], None]) -> int:
    control = SyncControlClient(host.control, host.token(), url_from=host.url_from())
    status = control.status()
    if ((status.profile, status.spec, status.state) == (target.profile, target.spec, State.SERVING)
            and _runs_target(control, target)):
        if router.find(host.server) is None:  # e.g. left out by an earlier run that was stopped
            router.add(host.server)
            router.wait_healthy(host.server, add_timeout_s)
            log.step(host.name, "restored_to_router", state=State.SERVING)
        log.step(host.name, "skipped", reason="already serving this plan")
        say(f"{host.name}: already on {target.label()}")
        return 0
    deadline = timeout_s if timeout_s is not None else switch_deadline_s(None)
    try:
        return _out_switch_in(host, target, router, control, log, timeout_s, deadline, add_timeout_s, say)
    except Interrupted as exc:
        if exc.restoring:  # a second signal while putting it back: recorded there, stop now
            raise
        log.step(host.name, "interrupted", signal=exc.signum)
        say(f"{host.name}: interrupted (signal {exc.signum}); putting it back if it serves")
        _restore(host, router, log, add_timeout_s, say)
        raise


def _runs_target(control: SyncControlClient, target: Target) -> bool:
    """Whether a host that /status shows serving profile + spec runs the target's point and tiers too (its
    running plan, GET /plan). Neither asked for: any will do, and the plan is not fetched."""
    if target.point is None and target.tiers is None:
        return True
    return target.run_by(control.running_plan())


def _out_switch_in(host: Host, target: Target, router: RouterClient,
                   control: SyncControlClient, log: History, timeout_s: float | None, deadline: float,
                   add_timeout_s: float, say: Callable[[str], None]) -> int:
    """Out of the router, switch (at most `deadline` s), back in; 1 when the host did not end on the plan."""
    removed = router.remove(host.server)
    log.step(host.name, "removed_from_router", was_registered=removed)
    say(f"{host.name}: out of the router; switching (waiting at most {deadline:.0f} s)")
    log.step(host.name, "switching", deadline_s=deadline)
    answer = control.switch(target.profile, target.spec, timeout_s, deadline, spec_params=target.point,
                            adaptive_tiers=target.tiers)
    if answer.timed_out:
        log.step(host.name, "switch_timed_out", deadline_s=deadline, error=answer.error)
        say(f"{host.name}: {answer.error}")
        _restore(host, router, log, add_timeout_s, say)
        return 1
    outcome = answer.outcome or (Outcome.FAILED if answer.code != 200 else Outcome.SWITCHED)
    log.step(host.name, "switched", outcome=outcome, http=answer.code, error=answer.error,
             backends=answer.entry.backends if answer.entry else None)
    if outcome not in OK_OUTCOMES:
        why = answer.error or f"outcome {outcome}"
        say(f"{host.name}: switch {outcome}: {why}")
        _restore(host, router, log, add_timeout_s, say)
        return 1
    router.add(host.server)
    try:
        router.wait_healthy(host.server, add_timeout_s)
    except RuntimeFailure as exc:
        log.step(host.name, "add_failed", error=str(exc))
        say(f"{host.name}: switched, but {exc}")
        return 1
    log.step(host.name, "back_in_router")
    say(f"{host.name}: on {target.label()}, back in the router")
    return 0


def _restore(host: Host, router: RouterClient, log: History, add_timeout_s: float, say: Callable[[str], None]) -> None:
    """After a failed, timed-out or interrupted switch: back into the router only if the host answers
    (a rolled-back host runs its old plan again); one that is still switching or down stays out.
    A second SIGINT/SIGTERM here is recorded and ends the wait."""
    try:
        state = SyncControlClient(host.control, host.token(), url_from=host.url_from()).status().state
        if state not in ANSWERING:
            log.step(host.name, "left_out", reason=f"state {state}")
            say(f"{host.name}: left out of the router (state {state}); once it serves, "
                "re-run `launcher fleet switch` to finish and put it back")
            return
        if router.find(host.server) is None:
            router.add(host.server)
        router.wait_healthy(host.server, add_timeout_s)
        log.step(host.name, "restored_to_router", state=state)
        say(f"{host.name}: back in the router (state {state})")
    except RuntimeFailure as exc:
        log.step(host.name, "left_out", reason=str(exc))
        say(f"{host.name}: left out of the router: {exc}")
    except Interrupted as exc:
        exc.restoring = True
        log.step(host.name, "left_out", reason=f"signal {exc.signum} while putting it back")
        raise
