"""Which profiles can run on this host, decided by the launcher's own rules (launcher.profiles.rules).

The doctor adds no rules of its own: a profile is eligible when `plan.evaluate` with these host
facts yields no error or ineligible finding. Unset MODEL_PATH and friends expand to placeholders
(`plan.check_environ`), so a missing environment variable does not read as an ineligible host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from launcher.errors import KitError
from launcher.profiles import loader as profiles
from launcher.profiles import plan as plans
from launcher.profiles.hostfacts import HostFacts

BLOCKING = ("error", "ineligible")


@dataclass
class Eligibility:
    ok: bool
    reason: str  # why not (rendered findings); empty when ok
    status: str = ""  # the profile's stable/experimental label
    messages: list[str] = field(default_factory=list)  # short form of the reason, one per finding
    warnings: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)  # conditions the facts could not settle

    def to_dict(self) -> dict:
        return asdict(self)


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
        )
    return out
