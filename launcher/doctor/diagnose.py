"""One doctor run: read inputs, derive facts, run checks, decide eligibility; JSON for machines."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path

from launcher.doctor import checks as checks_mod
from launcher.doctor import eligibility as elig_mod
from launcher.doctor import facts as facts_mod
from launcher.doctor.checks import Check
from launcher.doctor.probe import Probe
from launcher.profiles.hostfacts import HostFacts

SCHEMA = "kit.doctor/1"


@dataclass
class Report:
    facts: HostFacts
    details: dict
    checks: list[Check]
    eligibility: dict[str, elig_mod.Eligibility]
    spec: str = "off"
    host: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in ("pass", "warn", "fail")}

    def to_json(self) -> dict:
        """HostFacts keys at the top level (so `--host-facts` reads this file), then everything else."""
        data = self.facts.model_dump(mode="json")
        data.update(
            {
                "schema": SCHEMA,
                "host": self.host,
                **self.details,
                "checks": [c.to_dict() for c in self.checks],
                "summary": self.counts(),
                "eligibility_spec": self.spec,
                "eligibility": {k: v.to_dict() for k, v in self.eligibility.items()},
            }
        )
        return data


def run(
    probe: Probe,
    files: dict[str, Path | None],
    *,
    nccl_version: str | None = None,
    spec: str = "off",
) -> Report:
    inp = facts_mod.read_inputs(probe, files)
    facts_mod.read_power(probe, files.get("power"), inp)
    gpus_live = inp.sources.get("gpus") == "nvidia-smi" and bool(inp.gpus)
    host_checks, nccl_found = checks_mod.run_host_checks(probe, nccl_version, gpus_live)
    facts, details = facts_mod.build(inp, nccl_found)
    power = [checks_mod.power_limit(inp.power)] if inp.power else []  # unknown limits are a fact, not a check
    all_checks = [*inp.checks, *facts_mod.topology_checks(facts, inp, checks_mod.tp_size(probe.environ)), *power, *host_checks]
    if not facts.gpus and facts.interconnect is None:
        eligibility = elig_mod.no_facts("unknown: no GPU facts (nvidia-smi gave none; see the nvidia-smi check)")
    else:
        eligibility = elig_mod.evaluate_all(facts, spec, probe.environ)
    host = {"hostname": platform.node(), "kernel": platform.release()}
    return Report(facts=facts, details=details, checks=all_checks, eligibility=eligibility, spec=spec, host=host)
