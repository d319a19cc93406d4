"""`bench tune --adaptive`: SGLang's own adaptive config written from the static points the tune measured.

The static candidates (off and EAGLE-3 points) are measured at every `--concurrency` level in each repeat,
as always. Once the screening is done, `build` takes, for each profile, the fastest correct static point at
each level (its mean output tok/s there, over its screening repeats) and writes one tier per level
(launcher/profiles/adaptive_tiers.py `from_levels`): the tier keyed at the level holds the winning point's
steps, 0 where `off` won, so speculation stops where it does not pay. SGLang 0.5.23 serves a batch with the
largest tier at or below its size (srt/speculative/adaptive_spec_params.py:342-358), so each level's batches
run its winner and the batches between two levels the lower one's. A tier of one candidate never moves
(:213-261), so the written steps are what runs; SGLang needs top-k 1 (:75-79) and draft tokens = steps + 1
(srt/arg_groups/speculative_hook.py:1423-1427), so only top-k 1 points (and off) can fill a tier, and ngram
never does.

The profile is the one whose per-level winners promise the most (the geometric mean over the levels of each
level's best tok/s, the objective's own form, bench/tune/levels.py). That candidate,
`<profile>+eagle3-adaptive[1:S,4:S,16:0]`, joins the final beside the best static finalists and the running
plan, and the same rule decides (bench/tune/decision.py). No candidate is built, with the reason said, when
`off` wins at every level (nothing to speculate), when one point wins at every level (the static point is
the plan already), or when no profile has a correct static point measured at every level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench import bundle_names
from bench.tune.ledger import Ledger
from bench.tune.levels import geomean, level_means
from bench.tune.space import ADAPTIVE_SPEC, Candidate
from launcher.profiles.adaptive_tiers import AdaptiveTiers, from_levels
from launcher.runtime.control_client import ControlClient

# the phases whose repeats pick each level's winner: the same on a resumed run, which may have final repeats too
SCREENED = ("screen", "reference")


@dataclass(frozen=True)
class LevelWinner:
    """The fastest correct static point of the chosen profile at one concurrency level."""

    level: int
    label: str
    steps: int  # 0 for off
    tokps: float

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.level, "label": self.label, "steps": self.steps, "tokps": self.tokps}


@dataclass(frozen=True)
class AdaptivePlan:
    """What `build` found: the per-level winners, the tiers written from them and the candidate, or why none."""

    profile: str | None = None
    winners: tuple[LevelWinner, ...] = ()
    tiers: AdaptiveTiers | None = None
    predicted: float | None = None  # geometric mean over the levels of the winners' tok/s
    best_static: float | None = None  # the same of the best single static point of that profile
    reason: str = ""  # why no candidate, when none
    refused: str = ""  # the server's reason (POST /check), when it refused the candidate
    by_profile: dict[str, float] = field(default_factory=dict)  # each profile's promise

    @property
    def candidate(self) -> Candidate | None:
        if self.tiers is None or self.profile is None or self.refused:
            return None
        return Candidate(self.profile, ADAPTIVE_SPEC, tiers=self.tiers)

    def describe(self) -> str:
        if self.candidate is None:
            return f"adaptive: no candidate ({self.refused or self.reason})"
        assert self.tiers is not None
        won = ", ".join(f"{w.level}: {w.label} ({w.tokps:.1f} tok/s)" for w in self.winners)
        lead = f"; a single point's best {self.best_static:.1f}" if self.best_static else ""
        return (f"adaptive: per-level winners {won}; tiers {self.tiers.text()} (steps per batch size, 0: no "
                f"speculation) -> {self.candidate.label}, predicted {self.predicted:.1f} tok/s (geometric mean"
                f"{lead}); it joins the final")

    def to_json(self) -> dict[str, Any]:
        cand = self.candidate
        return {
            "profile": self.profile, "label": cand.label if cand else None,
            "per_level_winners": [w.to_json() for w in self.winners],
            "tiers": self.tiers.to_json() if self.tiers else None,
            "config": self.tiers.sglang_config() if self.tiers else None,
            "predicted_tokps": self.predicted, "best_static_tokps": self.best_static,
            "reason": self.reason or None, "refused": self.refused or None, "by_profile": self.by_profile,
        }


async def checked(plan: AdaptivePlan, control: ControlClient) -> tuple[AdaptivePlan, str | None]:
    """The plan once the server has judged its candidate (POST /check with `adaptive_tiers`, as a switch would
    validate it): (plan, the digest it would run), or (the plan refused with the server's reason, None)."""
    cand = plan.candidate
    if cand is None:
        return plan, None
    code, body = await control.check(cand.profile, cand.spec, cand.point_json(), cand.tiers_json())
    if code == 200 and isinstance(body.get("digest"), str):
        return plan, body["digest"]
    return replace(plan, refused=f"the server refuses {cand.label}: HTTP {code} {body.get('error')}"), None


def summary_lines(data: dict[str, Any], chosen: str | None) -> list[str]:
    """tune.json's `adaptive` as the lines the tune's summary prints: the per-level winners, the tiers written and
    how the decision went for them (`chosen`: the label the decision picked, or None)."""
    winners = data.get("per_level_winners") or []
    out = [f"adaptive: concurrency {w['concurrency']}: {w['label']} wins ({w['tokps']:.1f} tok/s) -> steps "
           f"{w['steps']}" for w in winners]
    label = data.get("label")
    if label is None:
        out.append(f"adaptive: no candidate: {data.get('refused') or data.get('reason')}")
        return out
    tiers = ",".join(f"{b}:{'/'.join(map(str, steps))}" for b, steps in data["tiers"].items())
    out.append(f"adaptive: tiers written {tiers} (batch size:steps; the --speculative-adaptive-config file is "
               "tune.json's adaptive.config)")
    verdict = "won: the written profile carries it" if chosen == label else f"did not win ({chosen or 'nothing'} chosen)"
    out.append(f"adaptive: {label} {verdict}")
    return out


def sharing_a_cell(plan: AdaptivePlan, others: Sequence[Candidate]) -> AdaptivePlan:
    """The plan, or the plan with no candidate when its bundle cell would be another candidate's. A bundle names
    a cell by profile, spec and point (bench/bundle_names.py), not by tiers, so an adaptive candidate with the
    same starting point as the running plan's own tiers (a tune after an --apply of an adaptive winner, say)
    would write over that cell's files; it is left out, and the reason names the cell."""
    cand = plan.candidate
    if cand is None:
        return plan
    name = bundle_names.cell_name(cand.profile, cand.spec, cand.point_json())
    for other in others:
        if other.label != cand.label and bundle_names.cell_name(other.profile, other.spec, other.point_json()) == name:
            return replace(plan, reason=f"{cand.label} would share the bundle cell {name} with {other.label}, whose "
                                        "tiers differ (a bundle names a cell by its starting point, not its tiers): "
                                        "not measured; switch production to another plan first, or give --eagle3 "
                                        "points whose winners start elsewhere", tiers=None)
    return plan


def tier_steps(cand: Candidate) -> int | None:
    """The steps a static candidate fills a tier with: 0 for off, S for a top-k 1 EAGLE-3 point; None otherwise."""
    if cand.spec == "off":
        return 0
    if cand.spec == "eagle3" and cand.point is not None and cand.point.topk == 1:
        return cand.point.steps
    return None


def build(cells: Ledger, candidates: Sequence[Candidate], levels: Sequence[int]) -> AdaptivePlan:
    """The adaptive plan from the static candidates measured so far (module docstring)."""
    levels = sorted(set(levels))
    means: dict[str, dict[str, dict[int, float]]] = {}  # profile -> label -> level -> tok/s
    for cand in dict.fromkeys(candidates):
        if tier_steps(cand) is None or cells.failure(cand.label):
            continue
        got = level_means(cells.entries_of(cand.label, SCREENED))
        if all(level in got for level in levels):
            means.setdefault(cand.profile, {})[cand.label] = got
    if not means:
        return AdaptivePlan(reason="no profile has a correct off or top-k 1 EAGLE-3 point measured at every "
                                   f"concurrency level {levels}")
    promise = {p: geomean(max(m[level] for m in by_label.values()) for level in levels)
               for p, by_label in means.items()}
    profile = max(promise, key=lambda p: promise[p])
    by_label = means[profile]
    winners = []
    for level in levels:
        label = max(by_label, key=lambda k: by_label[k][level])
        winners.append(LevelWinner(level, label, tier_steps(Candidate.parse(label)) or 0, by_label[label][level]))
    best_static = max(geomean(m[level] for level in levels) for m in by_label.values())
    common = dict(profile=profile, winners=tuple(winners), predicted=promise[profile], best_static=best_static,
                  by_profile=promise)
    if all(w.steps == 0 for w in winners):
        return AdaptivePlan(**common, reason=f"off wins at every level on {profile}: speculation pays nowhere")
    if len({w.label for w in winners}) == 1:
        return AdaptivePlan(**common, reason=f"{winners[0].label} wins at every level: that static point is the "
                                             "adaptive plan already")
    return AdaptivePlan(**common, tiers=from_levels({w.level: w.steps for w in winners}))
