"""The candidate space of `bench tune`: profiles × spec modes × EAGLE-3 points, each a `Candidate`.

Profiles are names, or `eligible`: every profile the launcher's own rules accept on this host under
the spec mode in question (launcher/doctor/eligibility.py, no rule of our own); the others are
listed with the reason the rules gave.

An EAGLE-3 point is launcher/profiles/spec_params.py's `SpecParams` (steps, topk, draft tokens),
written `S,K,D`, several as `S,K,D;S,K,D`, and parsed by its `parse_list`: `bench tune --eagle3`
accepts and refuses exactly the points `launcher switch --spec-params` and a profile's
`[spec_params]` table do, with the same words (SGLang 0.5.23's own rules: top-k 1 needs D = S + 1,
a top-k > 1 tree must offer D - 1 candidates). The tuner sets no bound of its own on a point.

The default points, DEFAULT_POINTS = (1,1,2), (2,1,3), (3,1,4), (4,1,5): top-k 1 chains only, which
keep trtllm_mha usable (profiles/spec/eagle3.toml) and are the one shape where D follows from S; they
bracket SGLang's own auto-pick for non-Llama targets, (3,1,4) (the shipped overlay), one step either
side and one shorter still. On a PCIe host a longer chain pays per step in draft time and per verify
in message size while the all-reduce count stays, so the best length is host-specific; four points
keep the screen short (one switch each).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.control.production import PlanRef
from launcher.errors import UserError
from launcher.profiles import adaptive_tiers, spec_params
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.spec_params import SpecParams

SPEC_MODES = ("off", "ngram", "eagle3")
ADAPTIVE_SPEC = adaptive_tiers.SPEC_MODE  # the spec mode a tuned adaptive config runs under (bench tune --adaptive)
ELIGIBLE = "eligible"
DEFAULT_POINTS = tuple(SpecParams(steps=s, topk=1, draft_tokens=s + 1) for s in (1, 2, 3, 4))


@dataclass(frozen=True)
class Candidate:
    """One (profile, spec mode, EAGLE-3 point) the tuner can measure; `point` only with eagle3. An eagle3
    candidate without a point runs the spec overlay's own (a running plan whose point is unknown). `tiers` only
    with eagle3-adaptive: the adaptive config `bench tune --adaptive` wrote (launcher/profiles/adaptive_tiers.py)."""

    profile: str
    spec: str
    point: SpecParams | None = None
    tiers: AdaptiveTiers | None = None

    def __post_init__(self) -> None:
        if self.point is not None and self.spec != "eagle3":
            raise ValueError(f"{self.profile}+{self.spec}: an EAGLE-3 point goes with spec eagle3 and only there")
        if self.tiers is not None and self.spec != ADAPTIVE_SPEC:
            raise ValueError(f"{self.profile}+{self.spec}: adaptive tiers go with spec {ADAPTIVE_SPEC} and only there")

    @classmethod
    def of_plan(cls, plan: PlanRef) -> Candidate:
        """The candidate a running plan (/plan) is: its profile, spec mode and, under eagle3, its point."""
        point = plan.spec_params if plan.spec == "eagle3" else None
        tiers = plan.adaptive_tiers if plan.spec == ADAPTIVE_SPEC else None
        return cls(str(plan.name), str(plan.spec), point, adaptive_tiers.from_json(tiers) if tiers is not None else None)

    def switch_point(self) -> SpecParams | None:
        """The point a switch to this candidate sends (the control API's `spec_params`), or None (the spec mode's own
        flags). With tiers, the point the server starts from (AdaptiveTiers.start_point, the plan's own choice made
        explicit), which also keeps its bundle cell apart from the reference's (bench/bundle/names.py names a cell by
        its point)."""
        if self.tiers is not None:
            return self.tiers.start_point()
        return self.point

    def tiers_json(self) -> dict[str, list[int]] | None:
        """The tiers as the control API's `adaptive_tiers` takes them, or None (the spec overlay's own config)."""
        return self.tiers.to_json() if self.tiers else None

    @property
    def label(self) -> str:
        """`fused+eagle3(1,1,2)`, `baseline+off`, `fused+eagle3-adaptive[1:2,4:0]`: stable, so the journal and
        tune.json can key on it."""
        return spec_params.label(self.profile, self.spec, self.point) + (self.tiers.label() if self.tiers else "")

    @classmethod
    def parse(cls, label: str) -> Candidate:
        m = re.fullmatch(r"([a-z0-9][a-z0-9._-]{0,63})\+([a-z0-9][a-z0-9._-]{0,63})(?:\(([0-9,]+)\))?"
                         r"(?:\[([0-9:,/]+)\])?", label)
        if not m:
            raise UserError(f"'{label[:80]}' is not a candidate label (profile+spec, profile+eagle3(S,K,D) or "
                            "profile+eagle3-adaptive[B:S,...])")
        point = spec_params.parse(m[3], f"candidate label '{label}'") if m[3] else None
        tiers = adaptive_tiers.parse(m[4], f"candidate label '{label}'") if m[4] else None
        try:
            return cls(m[1], m[2], point, tiers)
        except ValueError as exc:
            raise UserError(str(exc)) from exc


def parse_specs(text: str) -> tuple[str, ...]:
    """`off,ngram,eagle3` (any subset, in the order given)."""
    names = [raw.strip() for raw in text.split(",")]
    for name in names:
        if name not in SPEC_MODES:
            raise UserError(f"--spec: unknown mode '{name[:40]}'; the tuner knows {', '.join(SPEC_MODES)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Excluded:
    profile: str
    spec: str
    reason: str


def parse_profiles(text: str, known: Sequence[str]) -> tuple[str, ...] | str:
    """Comma-separated names (each must be known), or the keyword `eligible` (returned as is)."""
    if text.strip() == ELIGIBLE:
        return ELIGIBLE
    names = [raw.strip() for raw in text.split(",")]
    for name in names:
        if name not in known:
            raise UserError(f"--profiles: unknown profile '{name[:64]}'; known: {', '.join(known)} or '{ELIGIBLE}'")
    return tuple(dict.fromkeys(names))


def eligibility_by_spec(facts, specs: Iterable[str], environ: Mapping[str, str] | None = None) -> dict:
    """{spec: {profile: Eligibility}} from the launcher's rules with the doctor's host facts."""
    from launcher.doctor.eligibility import evaluate_all

    return {spec: evaluate_all(facts, spec, environ) for spec in specs}


def build_space(
    profiles: Sequence[str] | str,
    specs: Sequence[str],
    points: Sequence[SpecParams] = DEFAULT_POINTS,
    eligibility: Mapping[str, Mapping[str, object]] | None = None,
) -> tuple[list[Candidate], list[Excluded]]:
    """Candidates in profile, spec, point order, and the (profile, spec) pairs left out with why.

    `eligibility` is `eligibility_by_spec`'s answer; with it, a profile the rules refuse under a spec
    is left out (named profiles too: measuring a plan that cannot start wastes a switch). `profiles`
    = `eligible` needs it."""
    if profiles == ELIGIBLE:
        if eligibility is None:
            raise UserError("--profiles eligible needs host facts (launcher doctor --json) to decide eligibility")
        names: list[str] = []
        for spec in specs:
            for name in eligibility.get(spec, {}):
                if name not in names:
                    names.append(name)
    else:
        names = list(profiles)
    candidates: list[Candidate] = []
    excluded: list[Excluded] = []
    for name in names:
        for spec in specs:
            verdict = eligibility.get(spec, {}).get(name) if eligibility is not None else None
            if eligibility is not None and (verdict is None or not getattr(verdict, "ok", False)):
                reason = getattr(verdict, "reason", "") or "not evaluated for this spec mode"
                excluded.append(Excluded(name, spec, reason))
                continue
            if spec == "eagle3":
                candidates.extend(Candidate(name, spec, p) for p in points)
            else:
                candidates.append(Candidate(name, spec))
    return candidates, excluded
