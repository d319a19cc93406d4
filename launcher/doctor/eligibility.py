"""Which profiles can run on this host, decided by the launcher's own rules (launcher.profiles.rules).

The doctor adds no rules of its own: a profile is eligible when `plan.evaluate` with these host
facts yields no error or ineligible finding. Unset MODEL_PATH and friends expand to placeholders
(`plan.check_environ`), so a missing environment variable does not read as an ineligible host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from launcher.doctor.causes import drop_restated
from launcher.errors import KitError
from launcher.profiles import loader as profiles
from launcher.profiles import plan as plans
from launcher.profiles.hostfacts import HostFacts
from launcher.profiles.rules.context import Finding

BLOCKING = ("error", "ineligible")


@dataclass
class Eligibility:
    ok: bool
    reason: str  # why not (rendered findings); empty when ok
    status: str = ""  # the profile's stable/experimental label
    messages: list[str] = field(default_factory=list)  # short form of the reason, one per finding
    warnings: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)  # conditions the facts could not settle
    # The findings behind the lists above (a restated [requires] refusal left out), for grouping by
    # cause in the report; not part of the JSON.
    findings: list[Finding] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("findings")
        return data


def no_facts(reason: str) -> dict[str, Eligibility]:
    return {name: Eligibility(ok=False, reason=reason, messages=[reason]) for name in profiles.available_names()}


def evaluate_all(facts: HostFacts, spec: str = "off", environ: Mapping[str, str] | None = None) -> dict[str, Eligibility]:
    env = plans.check_environ(environ)
    out: dict[str, Eligibility] = {}
    for name in profiles.available_names():
        try:
            plan, findings = plans.evaluate(name, spec, facts, environ=env)
        except KitError as exc:  # a broken profile file: say so in its row, keep the others
            out[name] = Eligibility(ok=False, reason=str(exc), messages=[str(exc)])
            continue
        findings = drop_restated(findings)  # each reason once: symm-mem's [requires] repeats its rule
        blocking = [f for f in findings if f.level in BLOCKING]
        messages: list[str] = []
        for f in blocking:
            if f.message not in messages:
                messages.append(f.message)
        out[name] = Eligibility(
            ok=not blocking,
            reason="; ".join(f.render() for f in blocking),
            status=plan.status,
            messages=messages,
            warnings=[f.message for f in findings if f.level == "warning"],
            requires=[f.message for f in findings if f.level == "requires"],
            findings=findings,
        )
    return out
