"""Putting production on a plan after a command switched the server to measure it (`bench run`, `bench tune`),
checked on /status, and what a person types when that cannot be done.

A plan is the control API's /plan record (name, spec, spec_params, adaptive_tiers, digest), or a cell's plan in
the same shape. The plan found running is read before the first switch; where the command leaves production is
its own rule (bench/run/landing.py, bench/tune/production.py). `put_on` checks /status: a switch the command sent
before it was stopped may still run and finish after ours, so it tries again (ATTEMPTS) and says when it cannot.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Mapping
from typing import Any

from launcher.errors import RuntimeFailure
from launcher.profiles import adaptive_tiers, spec_params
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import ANSWERING, OK_OUTCOMES

ATTEMPTS = 3
EAGLE3 = "eagle3"

Plan = Mapping[str, Any]


def params_of(plan: Plan) -> dict[str, Any] | None:
    """The plan's `spec_params` as it was reported, sent back as they are so the plan's digest comes out the same."""
    params = plan.get("spec_params")
    return dict(params) if isinstance(params, Mapping) else None


def tiers_of(plan: Plan) -> dict[str, Any] | None:
    """The plan's adaptive tiers (spec eagle3-adaptive only), as the control API's `adaptive_tiers` takes them."""
    tiers = plan.get("adaptive_tiers")
    return dict(tiers) if plan.get("spec") == adaptive_tiers.SPEC_MODE and isinstance(tiers, Mapping) else None


def label_of(plan: Plan) -> str:
    """`fused+eagle3(1,1,2)`, `baseline+off`, `fused+eagle3-adaptive[1:2,4:0]`: the words `bench tune` and
    `bench run` name a plan with."""
    point = params_of(plan) if plan.get("spec") == EAGLE3 else None
    tiers = tiers_of(plan)
    text = spec_params.label(str(plan.get("name")), str(plan.get("spec")), point)
    return text + (adaptive_tiers.from_json(tiers).label() if tiers else "")


def plan_of(profile: str, spec: str, point: Mapping[str, Any] | None = None, tiers: Mapping[str, Any] | None = None,
            digest: str | None = None) -> dict[str, Any]:
    """A plan named by its parts (a measured cell's, the reference's): `digest` None when it is not known."""
    return {"name": profile, "spec": spec, "spec_params": dict(point) if point else None,
            "adaptive_tiers": dict(tiers) if tiers else None, "digest": digest}


def switch_command(plan: Plan, control: str) -> str:
    """The command that puts production on `plan` by hand."""
    point, tiers = params_of(plan), tiers_of(plan)
    if tiers is None:
        words = ["launcher", "switch", str(plan.get("name")), "--spec", str(plan.get("spec")), "--url", control]
        if point and plan.get("spec") == EAGLE3:
            words += ["--spec-params", f"{point.get('steps')},{point.get('topk')},{point.get('draft_tokens')}"]
        return shlex.join(words)
    body = json.dumps({"profile": plan.get("name"), "spec": plan.get("spec"), "adaptive_tiers": tiers,
                       **({"spec_params": point} if point else {})}, separators=(",", ":"))
    return (f"curl -sS -X POST {shlex.quote(control.rstrip('/') + '/switch')} -H \"Authorization: Bearer "
            f"$KIT_CONTROL_TOKEN\" -H 'Content-Type: application/json' -d {shlex.quote(body)}")


def runs(status: ServerStatus, plan: Plan) -> bool:
    """Whether /status shows `plan` answering: its profile and spec, and its digest where the plan has one."""
    same = (status.profile, status.spec) == (plan.get("name"), plan.get("spec"))
    digest = plan.get("digest")
    return same and (digest is None or status.digest == digest) and status.state in ANSWERING


async def put_on(client: ControlClient, plan: Plan, switch_timeout: float) -> str | None:
    """Production on `plan`, checked on /status: None once it answers there, else why not."""
    why = "no attempt"
    for _ in range(ATTEMPTS):
        status = await client.wait_idle(switch_timeout)
        if runs(status, plan):
            return None
        answer = await client.switch_when_idle(str(plan.get("name")), str(plan.get("spec")), switch_timeout,
                                               spec_params=params_of(plan), adaptive_tiers=tiers_of(plan))
        if answer.outcome not in OK_OUTCOMES:
            return f"HTTP {answer.code} {answer.outcome}: {answer.error}"
        to = answer.entry.to if answer.entry else None
        why = (f"it runs digest {to.digest if to else None}, not {plan.get('digest')} (were the profile's files "
               "edited since?)")
        if plan.get("digest") is None:
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
