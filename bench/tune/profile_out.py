"""The winner as a user profile: a TOML file that `extends` the winning profile, pins its EAGLE-3
point as the profile's `[spec_params]` table (`steps`, `topk`, `draft_tokens`), or, for an eagle3-adaptive
winner of `bench tune --adaptive`, its tiers as the `[adaptive_tiers]` table (launcher/profiles/adaptive_tiers.py),
and carries its evidence in comments: bundle path, figures, date and host fingerprint. Nothing from a measurement
reaches a TOML value but numbers; comment text is cut to one printable line, so a GPU name cannot
break the file.

Under `--spec eagle3` the plan lays that table over the spec overlay's three keys
(launcher/profiles/plan.py `evaluate`), so the profile runs the measured point; `--spec-params`
still wins over it, and under off/ngram it is ignored. An off/ngram winner has no such table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.tune.space import Candidate
from launcher.errors import UserError
from launcher.profiles.catalog import check_name

MARK = "# Written by `bench tune`"  # the first line of every profile file the tuner writes


@dataclass(frozen=True)
class Evidence:
    bundle: str  # where the tune's bundle is
    date: str  # UTC, ISO 8601
    figures: Mapping[str, str] = field(default_factory=dict)  # "tok/s" -> "95.2 ± 0.3 (n=8)", …
    host: Mapping[str, Any] = field(default_factory=dict)  # launcher.doctor.fingerprint.host_fingerprint()
    decision: str = ""  # the rule's one-line outcome


def _line(text: object, limit: int = 200) -> str:
    """One printable line: control characters (newlines included) become spaces."""
    return re.sub(r"[\x00-\x1f\x7f\u2028\u2029]", " ", str(text))[:limit]


def host_summary(host: Mapping[str, Any]) -> str:
    """`8x NVIDIA RTX PRO 6000 …, driver 580.65, pcie-switch, NCCL 2.27.3`, or why unavailable."""
    if not host:
        return "unknown"
    if host.get("available") is False:
        return f"unavailable ({host.get('reason', 'no reason given')})"
    gpus = host.get("gpus") or []
    names = sorted({g.get("name", "?") for g in gpus if isinstance(g, dict)})
    parts = [f"{len(gpus)}x {'/'.join(names) or '?'}"]
    for key, label in (("driver", "driver "), ("interconnect", ""), ("nccl", "NCCL ")):
        if host.get(key):
            parts.append(f"{label}{host[key]}")
    return ", ".join(parts)


def render(name: str, winner: Candidate, evidence: Evidence) -> str:
    """The profile file's text for `winner`, to be saved as `<folder>/<name>.toml`."""
    check_name("profile", name)
    check_name("profile", winner.profile)
    lines = [
        f"{MARK} on {_line(evidence.date)}: the fastest correct setup it measured on this host.",
        f"# winner: {_line(winner.label)}",
        f"# bundle: {_line(evidence.bundle, 400)}",
        f"# host: {_line(host_summary(evidence.host), 400)}",
    ]
    lines += [f"# {_line(k, 60)}: {_line(v)}" for k, v in evidence.figures.items()]
    if evidence.decision:
        lines.append(f"# decision: {_line(evidence.decision, 400)}")
    if winner.spec != "off":
        lines.append(f"# run it with --spec {winner.spec} (SPEC={winner.spec} for make)")
    point = f" {winner.point.text()}" if winner.point else f" {winner.tiers.text()}" if winner.tiers else ""
    description = f"bench tune winner: {winner.profile} + {winner.spec}{point}, measured {evidence.date[:10]}"
    lines += [
        f'extends = "{winner.profile}"',
        f'description = "{_line(description).replace(chr(92), "").replace(chr(34), "")}"',
        'status = "experimental"',
    ]
    if winner.point:
        lines += ["", "[spec_params]", "# the EAGLE-3 point the tune measured; applies under --spec eagle3"]
        lines += [f"{k} = {v}" for k, v in winner.point.model_dump().items()]
    if winner.tiers:
        lines += ["", "[adaptive_tiers]", "# batch size = EAGLE-3 steps SGLang runs at that size and up to the next "
                  "(0: a 0-step EAGLE pass, not plain decoding); written to the --speculative-adaptive-config file under --spec eagle3-adaptive"]
        lines += [f"{b} = {list(steps)}" for b, steps in winner.tiers.tiers]
    return "\n".join(lines) + "\n"


def check_profile_target(folder: Path, name: str) -> Path:
    """Where the winner's profile file goes; exit 2 when a file there was not written by the tuner."""
    path = folder / f"{name}.toml"
    if path.exists():
        try:
            first = path.read_text(encoding="utf-8").splitlines()[:1]
        except (OSError, UnicodeDecodeError):
            first = []
        if not first or not first[0].startswith(MARK):
            raise UserError(f"--profile-name {name}: {path} exists and was not written by bench tune; choose another "
                            "--profile-name or --profile-dir (nothing was switched)")
    return path
