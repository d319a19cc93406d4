"""What a tune measures, decided before its first switch: the candidates from the flags, checked
against the server's own profile and spec lists, its eligibility under the host facts and its own
POST /check, and put in the order the cost model predicts (bench/tune/order.py).

A mistake in the flags is exit 2 here, before anything is switched: a spec mode or profile the server
does not know, an EAGLE-3 point the server refuses under every profile. A candidate the server refuses
is left out with its reason, and a refused reference (`baseline+<spec>`) leaves out its spec mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.run import correctness
from bench.run.measure import over_cap
from bench.tune import order, space
from bench.tune.settings import TuneSettings
from bench.tune.space import Candidate
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles import running_requests
from launcher.profiles.hostfacts import load_host_facts
from launcher.runtime.activation import flag_map
from launcher.runtime.api.control_client import ControlClient

REFERENCE_PROFILE = correctness.BASELINE


@dataclass
class TuneSpace:
    """The candidates to measure, most promising first (`ordered`), and what was left out and why."""

    candidates: list[Candidate] = field(default_factory=list)
    excluded: list[space.Excluded] = field(default_factory=list)
    ordered: list[Candidate] = field(default_factory=list)
    predictions: dict[str, float] = field(default_factory=dict)  # label -> predicted tok/s
    plan_digests: dict[str, str] = field(default_factory=dict)  # label -> the digest the server would run
    model_plan: dict = field(default_factory=dict)  # a checked plan: its model is what the order counts collectives of


async def plan_space(s: TuneSettings, control: ControlClient, say: Callable[[str], None]) -> TuneSpace:
    """Candidates from the flags, checked against the server's own profile and spec lists (exit 2)."""
    known = [p.name for p in await control.profiles()]
    modes = await control.spec_modes()
    for spec in s.specs:
        if spec not in modes:
            raise UserError(f"--spec: the server has no spec mode '{spec}'; it knows {', '.join(modes) or '(none)'}")
    if REFERENCE_PROFILE not in known:
        raise UserError(f"the server has no profile '{REFERENCE_PROFILE}': every cell is gated against it")
    eligibility = None
    if s.facts:
        eligibility = space.eligibility_by_spec(load_host_facts(s.facts), s.specs)
        for spec in eligibility:  # the server's list is what can be switched to
            eligibility[spec] = {n: v for n, v in eligibility[spec].items() if n in known}
    profiles = s.profiles if s.profiles == space.ELIGIBLE else space.parse_profiles(",".join(s.profiles), known)
    sp = TuneSpace()
    sp.candidates, sp.excluded = space.build_space(profiles, s.specs, s.points, eligibility)
    await server_check(s, control, sp)
    for ex in sp.excluded:
        say(f"left out: {ex.profile}+{ex.spec}: {ex.reason}")
    if not sp.candidates:
        raise UserError("no candidate is left to measure (every profile was left out: see above); name others "
                        "with --profiles or check the host facts")
    preds = order.rank(sp.candidates, order.load_curves(s.allreduce), order.priors_for(sp.model_plan, s.temperature))
    sp.ordered = [p.candidate for p in preds]
    sp.predictions = {p.candidate.label: p.tokps for p in preds}
    return sp


def _refuse_over_cap(s: TuneSettings, label: str, plan: object) -> None:
    """A --concurrency level above the most requests the plan's server runs at once (its flags: 48 under EAGLE
    unless --max-running-requests, launcher/profiles/running_requests.py) is exit 2 before anything is switched:
    the level would time the cap running and the rest queued, beside `off` running them all (bench.run.measure
    over_cap, which also checks each server's own /server_info as its cell starts)."""
    flags = plan.get("flags") if isinstance(plan, dict) else None
    if not isinstance(flags, list):
        return
    cap, _ = running_requests.resolve(flag_map([str(f) for f in flags]))
    refused = over_cap(s.concurrency, cap, label, "as its plan's flags resolve it")
    if refused:
        raise UserError(f"{refused} (nothing was switched)")


async def server_check(s: TuneSettings, control: ControlClient, sp: TuneSpace) -> None:
    """Every candidate and reference as the server would run it (POST /check: the rules with its host
    facts, SGLang's parser, the patch check), before the first switch. An EAGLE-3 point the server
    refuses under every profile is the user's mistake (exit 2); a refused candidate is left out with
    the server's reason, and a refused reference leaves out its spec mode (nothing to gate against)."""
    refs = [Candidate(REFERENCE_PROFILE, spec) for spec in s.reference_specs()]
    refused: dict[str, str] = {}
    for c in [*refs, *sp.candidates]:
        answer = await control.check(c.profile, c.spec, c.switch_point())
        code = answer.code
        if code in (401, 403):
            raise UserError(f"the control API refused POST /check (HTTP {code}): {answer.error}; "
                            "set KIT_CONTROL_TOKEN")
        if code == 200 and answer.digest is not None:
            sp.plan_digests[c.label] = answer.digest
            plan = answer.plan.to_json() if answer.plan is not None else None
            _refuse_over_cap(s, c.label, plan)
            if not sp.model_plan and plan is not None:
                sp.model_plan = plan
        elif code == 400:
            refused[c.label] = str(answer.error or "refused")
        else:
            raise RuntimeFailure(f"the control API's POST /check answered HTTP {code}: {answer.error}")
    for point in s.points:
        tried = [c.label for c in sp.candidates if c.point == point]
        if tried and all(label in refused for label in tried):
            raise UserError(f"--eagle3: point '{point.text()}' is refused by the server under every profile "
                            f"(nothing was switched): {refused[tried[0]]}")
    bad_specs = {r.spec: refused[r.label] for r in refs if r.label in refused}
    kept = []
    for c in sp.candidates:
        if c.spec in bad_specs:
            why = f"its reference {REFERENCE_PROFILE}+{c.spec} is refused: {bad_specs[c.spec]}"
        elif c.label in refused:
            why = f"the server refuses it: {refused[c.label]}"
        else:
            kept.append(c)
            continue
        sp.excluded.append(space.Excluded(c.profile, c.spec + (c.point.label() if c.point else ""), why))
    sp.candidates = kept
