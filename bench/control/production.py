"""Putting production on a plan after a command switched the server to measure it (`bench run`, `bench tune`),
checked on /status, and what a person types when that cannot be done.

A plan is `PlanRef`: the control API's /plan record's name, spec, spec_params, adaptive_tiers and digest, or a
cell's plan in the same shape. Every function here also takes that record as JSON (a /plan body, a tune's
tune-state.json) and reads it into a `PlanRef` first. The plan found running is read before the first switch; where the command leaves production is
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
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import ANSWERING, OK_OUTCOMES

ATTEMPTS = 3
EAGLE3 = "eagle3"

@dataclass(frozen=True)
class PlanRef:
    """A plan production can be put on, by the parts a switch names it with. `spec_params` and `adaptive_tiers` are
    kept as the control API reported them and sent back as they are, so the plan's digest comes out the same;
    `digest` None when it is not known (then any plan of that name and spec will do)."""

    name: str | None
    spec: str | None
    spec_params: Mapping[str, object] | None = None
    adaptive_tiers: Mapping[str, object] | None = None
    digest: str | None = None

    @classmethod
    def of(cls, plan: PlanRef | Mapping[str, object]) -> PlanRef:
        """The record from its JSON (a /plan body, a cell's plan, tune-state.json's `start_plan`), read as the
        functions here always read it: a part that is not of its type is None (a name or spec is taken as text)."""
        if isinstance(plan, PlanRef):
            return plan
        name, spec, params, tiers, digest = (plan.get(k) for k in ("name", "spec", "spec_params", "adaptive_tiers",
                                                                      "digest"))
        return cls(None if name is None else str(name), None if spec is None else str(spec),
                   dict(params) if isinstance(params, Mapping) else None,
                   dict(tiers) if isinstance(tiers, Mapping) else None,
                   digest if isinstance(digest, str) else None)

    def to_json(self) -> dict[str, object]:
        """The plan as the control API's /plan names it (name, spec, spec_params, adaptive_tiers, digest)."""
        return {"name": self.name, "spec": self.spec,
                "spec_params": dict(self.spec_params) if self.spec_params is not None else None,
                "adaptive_tiers": dict(self.adaptive_tiers) if self.adaptive_tiers is not None else None,
                "digest": self.digest}


Plan = PlanRef | Mapping[str, object]  # the record, or its JSON


def params_of(plan: Plan) -> dict[str, object] | None:
    """The plan's `spec_params` as it was reported, sent back as they are so the plan's digest comes out the same."""
    params = PlanRef.of(plan).spec_params
    return dict(params) if params is not None else None


def tiers_of(plan: Plan) -> dict[str, object] | None:
    """The plan's adaptive tiers (spec eagle3-adaptive only), as the control API's `adaptive_tiers` takes them."""
    ref = PlanRef.of(plan)
    return dict(ref.adaptive_tiers) if ref.spec == adaptive_tiers.SPEC_MODE and ref.adaptive_tiers is not None else None


def label_of(plan: Plan) -> str:
    """`fused+eagle3(1,1,2)`, `baseline+off`, `fused+eagle3-adaptive[1:2,4:0]`: the words `bench tune` and
    `bench run` name a plan with."""
    ref = PlanRef.of(plan)
    point = params_of(ref) if ref.spec == EAGLE3 else None
    tiers = tiers_of(ref)
    text = spec_params.label(str(ref.name), str(ref.spec), point)
    return text + (adaptive_tiers.from_json(tiers).label() if tiers else "")


def plan_ref(profile: str, spec: str, point: Mapping[str, object] | None = None,
             tiers: Mapping[str, object] | None = None, digest: str | None = None) -> PlanRef:
    """A plan named by its parts (a measured cell's, the reference's): `digest` None when it is not known."""
    return PlanRef(profile, spec, dict(point) if point else None, dict(tiers) if tiers else None, digest)


def plan_of(profile: str, spec: str, point: Mapping[str, object] | None = None,
            tiers: Mapping[str, object] | None = None, digest: str | None = None) -> dict[str, object]:
    """`plan_ref` as JSON, for a caller that keeps the plan as JSON (a tune's tune-state.json)."""
    return plan_ref(profile, spec, point, tiers, digest).to_json()


def switch_command(plan: Plan, control: str) -> str:
    """The command that puts production on `plan` by hand."""
    ref = PlanRef.of(plan)
    point, tiers = params_of(ref), tiers_of(ref)
    if tiers is None:
        words = ["launcher", "switch", str(ref.name), "--spec", str(ref.spec), "--url", control]
        if point and ref.spec == EAGLE3:
            words += ["--spec-params", f"{point.get('steps')},{point.get('topk')},{point.get('draft_tokens')}"]
        return shlex.join(words)
    body = json.dumps({"profile": ref.name, "spec": ref.spec, "adaptive_tiers": tiers,
                       **({"spec_params": point} if point else {})}, separators=(",", ":"))
    return (f"curl -sS -X POST {shlex.quote(control.rstrip('/') + '/switch')} -H \"Authorization: Bearer "
            f"$KIT_CONTROL_TOKEN\" -H 'Content-Type: application/json' -d {shlex.quote(body)}")


def runs(status: ServerStatus, plan: Plan) -> bool:
    """Whether /status shows `plan` answering: its profile and spec, and its digest where the plan has one."""
    ref = PlanRef.of(plan)
    same = (status.profile, status.spec) == (ref.name, ref.spec)
    return same and (ref.digest is None or status.digest == ref.digest) and status.state in ANSWERING


async def put_on(client: ControlClient, plan: Plan, switch_timeout: float) -> str | None:
    """Production on `plan`, checked on /status: None once it answers there, else why not."""
    plan = PlanRef.of(plan)
    why = "no attempt"
    for _ in range(ATTEMPTS):
        status = await client.wait_idle(switch_timeout)
        if runs(status, plan):
            return None
        answer = await client.switch_when_idle(str(plan.name), str(plan.spec), switch_timeout,
                                               spec_params=params_of(plan), adaptive_tiers=tiers_of(plan))
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
             plan: Plan) -> tuple[str | None, str]:
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
