"""What a start or a switch checks before it touches the running server: the plan, and its patches."""

from __future__ import annotations

from launcher import settings
from launcher.errors import UserError
from launcher.profiles import sglang_args
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.plan import Plan, build_plan
from launcher.profiles.spec_params import SpecParams


def host_facts():
    """KIT_HOST_FACTS, when set: the host-dependent rules then run against the doctor's findings."""
    path = settings.KIT_HOST_FACTS.get()
    if path is None:
        return None
    from launcher.profiles.hostfacts import load_host_facts

    return load_host_facts(path)


def patch_check() -> str:
    """What /status shows: whether profiles' SGLang patches are enforced (KIT_PATCH_CHECK)."""
    return settings.KIT_PATCH_CHECK.get() or "enforce"


def validated_plan(profile: str, spec: str, spec_params: SpecParams | None = None,
                   model_overlay: str | None = None,
                   adaptive_tiers: AdaptiveTiers | dict | None = None) -> Plan:
    """The plan for (profile, spec) at an EAGLE point (None: the spec overlay's), under a model overlay (None: the
    MODEL_OVERLAY setting's, "" none), or UserError (HTTP 400 / exit 2) with nothing changed; a point for a
    spec mode that is not EAGLE is one. `adaptive_tiers`: a tuned adaptive config (launcher/profiles/adaptive_tiers.py),
    refused under any spec mode but eagle3-adaptive."""
    from launcher.runtime.records import patch_record

    plan = build_plan(profile, spec, host_facts(), use_parser=sglang_args.available(), spec_params=spec_params,
                      model_overlay=model_overlay, adaptive_tiers=adaptive_tiers)
    if patch_check() == "enforce":
        absent = patch_record.missing(plan.patches)
        if absent:
            raise UserError(
                f"profile '{profile}' needs SGLang patch(es) {', '.join(absent)}, which the installed sglang lacks; "
                f"rebuild the server image (`make build`) so patches/apply.py runs (or set "
                f"{settings.KIT_PATCH_CHECK.name}=skip for a server command without the patched sglang)"
            )
    return plan
