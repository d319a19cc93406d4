"""The candidate space of `bench tune`: profiles × spec modes × EAGLE-3 points, each a `Candidate`.

Profiles are names, or `eligible`: every profile the launcher's own rules accept on this host under
the spec mode in question (launcher/doctor/eligibility.py, no rule of our own); the others are
listed with the reason the rules gave.

An EAGLE-3 point is (steps, topk, draft tokens), written `S,K,D`, several as `S,K,D;S,K,D`. A point
SGLang 0.5.23 would not run as written is refused (exit 2, naming it):
- steps and topk from 1 to 16, draft tokens at least 2 (the verified root plus one proposal);
- topk 1 needs D = S + 1: SGLang rewrites any other D to S + 1 (speculative_hook.py:1257), so the
  label would name a point that never ran;
- topk > 1 needs D ≤ 1 + K + (S - 1)·K², the candidates the draft tree offers.

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

from launcher.errors import UserError

SPEC_MODES = ("off", "ngram", "eagle3")
ELIGIBLE = "eligible"
SPEC_PARAM_KEYS = ("steps", "topk", "draft_tokens")
MAX_STEPS = 16
MAX_TOPK = 16


@dataclass(frozen=True, order=True)
class Eagle3Point:
    steps: int
    topk: int
    draft_tokens: int

    @property
    def text(self) -> str:
        return f"{self.steps},{self.topk},{self.draft_tokens}"

    def problem(self) -> str | None:
        """Why SGLang would not run this point as written, or None."""
        s, k, d = self.steps, self.topk, self.draft_tokens
        if not 1 <= s <= MAX_STEPS:
            return f"steps must be 1..{MAX_STEPS}, got {s}"
        if not 1 <= k <= MAX_TOPK:
            return f"topk must be 1..{MAX_TOPK}, got {k}"
        if d < 2:
            return f"draft tokens must be at least 2 (the root plus one proposal), got {d}"
        if k == 1 and d != s + 1:
            return f"with topk 1 SGLang runs steps + 1 = {s + 1} draft tokens, not {d}; write {s},1,{s + 1}"
        if k > 1 and d > 1 + k + (s - 1) * k * k:
            return f"{d} draft tokens exceed the {1 + k + (s - 1) * k * k} the draft tree offers at {s} steps, topk {k}"
        return None

    def server_flags(self) -> dict[str, int]:
        """The `[server]` keys of profiles/spec/eagle3.toml this point sets."""
        return {
            "speculative-num-steps": self.steps,
            "speculative-eagle-topk": self.topk,
            "speculative-num-draft-tokens": self.draft_tokens,
        }


DEFAULT_POINTS = (Eagle3Point(1, 1, 2), Eagle3Point(2, 1, 3), Eagle3Point(3, 1, 4), Eagle3Point(4, 1, 5))

_POINT = re.compile(r"\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*")
_ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


def parse_points(text: str, flag: str = "--eagle3") -> tuple[Eagle3Point, ...]:
    """`S,K,D[;S,K,D…]` -> points in the order given, duplicates dropped; UserError names a bad one."""
    parts = text.split(";")
    out: list[Eagle3Point] = []
    for i, raw in enumerate(parts, 1):
        where = f"{flag}: {_ORDINAL.get(i, f'{i}th')} point '{raw.strip()[:40]}'"
        m = _POINT.fullmatch(raw)
        if not m:
            raise UserError(f"{where} is not S,K,D (steps, topk, draft tokens: three integers, e.g. 3,1,4; "
                            "several separated by ';')")
        point = Eagle3Point(*(int(g) for g in m.groups()))
        problem = point.problem()
        if problem:
            raise UserError(f"{where}: {problem}")
        out.append(point)
    return tuple(dict.fromkeys(out))  # duplicates dropped, order kept


@dataclass(frozen=True)
class Candidate:
    """One (profile, spec mode, EAGLE-3 point) the tuner can measure; `point` only with eagle3. An eagle3
    candidate without a point runs the spec overlay's own (a running plan whose point is unknown)."""

    profile: str
    spec: str
    point: Eagle3Point | None = None

    def __post_init__(self) -> None:
        if self.point is not None and self.spec != "eagle3":
            raise ValueError(f"{self.profile}+{self.spec}: an EAGLE-3 point goes with spec eagle3 and only there")

    @classmethod
    def of_plan(cls, plan: Mapping[str, object]) -> Candidate:
        """The candidate a running plan (/plan) is: its profile, spec mode and, under eagle3, its point."""
        params = plan.get("spec_params") if plan.get("spec") == "eagle3" else None
        point = Eagle3Point(*(int(params[k]) for k in SPEC_PARAM_KEYS)) if isinstance(params, Mapping) else None
        return cls(str(plan.get("name")), str(plan.get("spec")), point)

    def point_json(self) -> dict[str, int] | None:
        """The point as the control API's `spec_params` takes it, or None (the spec mode's own flags)."""
        return dict(zip(SPEC_PARAM_KEYS, (self.point.steps, self.point.topk, self.point.draft_tokens), strict=True)) \
            if self.point else None

    @property
    def label(self) -> str:
        """`fused+eagle3(1,1,2)`, `baseline+off`: stable, so the journal and tune.json can key on it."""
        tail = f"({self.point.text})" if self.point else ""
        return f"{self.profile}+{self.spec}{tail}"

    @property
    def spec_params(self) -> dict[str, int]:
        """The speculation parameters this candidate pins (empty but for eagle3)."""
        return self.point.server_flags() if self.point else {}

    @classmethod
    def parse(cls, label: str) -> Candidate:
        m = re.fullmatch(r"([a-z0-9][a-z0-9._-]{0,63})\+([a-z0-9][a-z0-9._-]{0,63})(?:\((\d+),(\d+),(\d+)\))?", label)
        if not m:
            raise UserError(f"'{label[:80]}' is not a candidate label (profile+spec or profile+eagle3(S,K,D))")
        point = Eagle3Point(int(m[3]), int(m[4]), int(m[5])) if m[3] else None
        try:
            return cls(m[1], m[2], point)
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
    points: Sequence[Eagle3Point] = DEFAULT_POINTS,
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
