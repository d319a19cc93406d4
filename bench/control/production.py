"""Putting production on a plan after a command switched the server to measure it (`bench run`, `bench tune`),
checked on /status, and what a person types when that cannot be done.

A plan is `PlanRef`: the control API's /plan record's name, spec, spec_params, adaptive_tiers and digest, or a
cell's plan in the same shape; its JSON (a /plan body, a tune's tune-state.json) is read into one with
`PlanRef.from_json`. The plan found running is read before the first switch; where the command leaves production is
its own rule (bench/run/landing.py, bench/tune/production.py). `put_on` checks /status: a switch the command sent
before it was stopped may still run and finish after ours, so it tries again (ATTEMPTS) and says when it cannot.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import RuntimeFailure
from launcher.profiles import adaptive_tiers, spec_params
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import ANSWERING, OK_OUTCOMES

ATTEMPTS = 3
EAGLE3 = "eagle3"

@dataclass(frozen=True)
class PlanRef:
    """A plan production can be put on, by the parts a switch names it with. `spec_params` (the point the plan's
    flags pin, which a switch sets again as the same three flags) and `adaptive_tiers` (kept as the control API
    reported them) are sent back so the plan's digest comes out the same; `digest` None when it is not known (then
    any plan of that name and spec will do)."""

    name: str | None
    spec: str | None
    spec_params: SpecParams | None = None
    adaptive_tiers: Mapping[str, object] | None = None
    digest: str | None = None

    @classmethod
    def from_json(cls, plan: Mapping[str, object]) -> PlanRef:
        """The record from its JSON (a /plan body, a cell's plan, tune-state.json's `start_plan`): a part that is not
        of its type is None (a name or spec is taken as text)."""
        name, spec, params, tiers, digest = (plan.get(k) for k in ("name", "spec", "spec_params", "adaptive_tiers",
                                                                      "digest"))
        return cls(None if name is None else str(name), None if spec is None else str(spec), spec_params.lenient(params),
                   dict(tiers) if isinstance(tiers, Mapping) else None,
                   digest if isinstance(digest, str) else None)

    def to_json(self) -> dict[str, object]:
        """The plan as the control API's /plan names it (name, spec, spec_params, adaptive_tiers, digest)."""
        return {"name": self.name, "spec": self.spec,
                "spec_params": self.spec_params.model_dump() if self.spec_params is not None else None,
                "adaptive_tiers": dict(self.adaptive_tiers) if self.adaptive_tiers is not None else None,
                "digest": self.digest}


def tiers_of(plan: PlanRef) -> dict[str, object] | None:
    """The plan's adaptive tiers (spec eagle3-adaptive only), as the control API's `adaptive_tiers` takes them."""
    tiers = plan.adaptive_tiers
    return dict(tiers) if plan.spec == adaptive_tiers.SPEC_MODE and tiers is not None else None


def label_of(plan: PlanRef) -> str:
    """`fused+eagle3(1,1,2)`, `baseline+off`, `fused+eagle3-adaptive[1:2,4:0]`: the words `bench tune` and
    `bench run` name a plan with."""
    point = plan.spec_params if plan.spec == EAGLE3 else None
    tiers = tiers_of(plan)
    text = spec_params.label(str(plan.name), str(plan.spec), point)
    return text + (adaptive_tiers.from_json(tiers).label() if tiers else "")


def plan_ref(profile: str, spec: str, point: SpecParams | None = None,
             tiers: Mapping[str, object] | None = None, digest: str | None = None) -> PlanRef:
    """A plan named by its parts (a measured cell's, the reference's): `digest` None when it is not known."""
    return PlanRef(profile, spec, point, dict(tiers) if tiers else None, digest)


def switch_command(plan: PlanRef, control: str) -> str:
    """The command that puts production on `plan` by hand."""
    point, tiers = plan.spec_params, tiers_of(plan)
    if tiers is None:
        words = ["launcher", "switch", str(plan.name), "--spec", str(plan.spec), "--url", control]
        if point and plan.spec == EAGLE3:
            words += [spec_params.FLAG, point.text()]
        return shlex.join(words)
    body = json.dumps({"profile": plan.name, "spec": plan.spec, "adaptive_tiers": tiers,
                       **({"spec_params": point.model_dump()} if point else {})}, separators=(",", ":"))
    return (f"curl -sS -X POST {shlex.quote(control.rstrip('/') + '/switch')} -H \"Authorization: Bearer "
            f"$KIT_CONTROL_TOKEN\" -H 'Content-Type: application/json' -d {shlex.quote(body)}")


def runs(status: ServerStatus, plan: PlanRef) -> bool:
    """Whether /status shows `plan` answering: its profile and spec, and its digest where the plan has one."""
    same = (status.profile, status.spec) == (plan.name, plan.spec)
    return same and (plan.digest is None or status.digest == plan.digest) and status.state in ANSWERING


async def put_on(client: ControlClient, plan: PlanRef, switch_timeout: float) -> str | None:
    """Production on `plan`, checked on /status: None once it answers there, else why not."""
    why = "no attempt"
    for _ in range(ATTEMPTS):
        status = await client.wait_idle(switch_timeout)
        if runs(status, plan):
            return None
        answer = await client.switch_when_idle(str(plan.name), str(plan.spec), switch_timeout,
                                               spec_params=plan.spec_params, adaptive_tiers=tiers_of(plan))
        if answer.outcome not in OK_OUTCOMES:
            return f"HTTP {answer.code} {answer.outcome}: {answer.error}"
        to = answer.entry.to if answer.entry else None
        why = (f"it runs digest {to.digest if to else None}, not {plan.digest} (were the profile's files "
               "edited since?)")
        if plan.digest is None:
            return None  # the switch ran the plan as asked; there is no digest to hold it to
    status = await client.wait_idle(switch_timeout)
    return None if runs(status, plan) else why


def now_running(status: ServerStatus | None) -> str:
    """What /status says production runs, for a message: `fused+eagle3 (serving)`, or that it is unknown."""
    if status is None or not status.profile:
        return "unknown (the control API did not say)"
    return f"{status.profile}+{status.spec} ({status.state}, digest {status.digest})"


def put_back(control: str, token: str | None, connect_timeout: float, switch_timeout: float,
             plan: PlanRef) -> tuple[str | None, str]:
    """`put_on` from synchronous code: (None, what runs) on success, else (why not, what /status says runs now)."""

    async def go() -> tuple[str | None, str]:
        async with ControlClient(control, token, connect_timeout) as client:
            why = await put_on(client, plan, switch_timeout)
            try:
                status = await client.status()
            except RuntimeFailure:
                status = None
            return why, now_running(status)

    try:
        return asyncio.run(go())
    except RuntimeFailure as exc:
        return str(exc), now_running(None)
