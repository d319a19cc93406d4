"""`bench tune --adaptive`: SGLang's own adaptive config written from the EAGLE-3 points the tune measured.

The static candidates (off and EAGLE-3 points) are measured at every `--concurrency` level in each repeat,
as always. Once the screening is done, `build` takes, for each profile, the fastest correct EAGLE measurement
at each level (its mean output tok/s there, over its screening repeats) and writes one tier per level
(launcher/profiles/tier_routing.py `from_levels`) holding those steps.

What fills a tier, and what never does:
* a top-k 1 EAGLE-3 point `(S,1,S+1)`: S steps at every level (SGLang needs top-k 1, adaptive_spec_params.py:75-79,
  and sets draft tokens to steps + 1, srt/arg_groups/speculative_hook.py:1423-1427); ngram and wider points never;
* an eagle3-adaptive plan measured at a level whose tier there holds one step (a tier of one candidate never
  moves, :213-261): that step, 0 included. This is the only source of a 0-step tier: a measured 0-step EAGLE pass;
* never `off`. A 0-step tier is no plain decoding: SGLang 0.5.23 still runs a 1-node verify through the
  target-verify graph (srt/speculative/eagle_worker_v2.py:1469-1472, 1678-1686), the draft model's extend forward
  every step unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND is set (:1491-1504), and EAGLE's cap of 48 running
  requests (speculative_hook.py:1086-1094); the `off` cell had none of these. Where `off` is the fastest at a
  level, the level keeps the best EAGLE steps measured there, and tune.json and the summary say so: speculation
  cannot be turned off inside one EAGLE server.

Where each tier is keyed: SGLang pads a batch to the `--cuda-graph-bs-decode` size at or above it, then serves it
with the largest tier at or below that (adaptive_spec_params.py:342-358), so a tier keyed at a measured level could
serve another level's batches. Each tier is keyed at the size SGLang routes that level's batches to
(tier_routing.Routing: the plan's own capture list and request cap, read from the server's POST /check of the
profile's eagle3-adaptive plan, `checked`). Levels routed to one tier are one batch size to SGLang: that tier holds
the EAGLE steps with the best geometric mean over those levels, and the summary names them.

The profile is the one whose per-level EAGLE steps promise the most (the geometric mean over the levels of the tok/s
each level runs, the objective's own form, bench/tune/levels.py). That candidate,
`<profile>+eagle3-adaptive[1:S,4:S,16:S]`, is judged by the server (POST /check: every plan rule with its host
facts, as a switch is), and only then joins the final beside the best static finalists and the running plan, where
the same rule decides (bench/tune/decision.py). Tiers the server refuses are never written: tune.json keeps them
under `refused_tiers` with the reason. No candidate is built, with the reason said, when `off` is faster than every
EAGLE measurement at every level, when one set of steps serves every tier (the static point is the plan already),
or when no profile has a correct EAGLE measurement at every level.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from bench import JsonObject
from bench.bundle import names as bundle_names
from bench.tune.ledger import Ledger
from bench.tune.levels import geomean, level_means
from bench.tune.space import ADAPTIVE_SPEC, Candidate
from launcher.errors import UserError
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.tier_routing import Routing, from_levels
from launcher.runtime.api.control_client import ControlClient

# the phases whose repeats pick each level's steps: the same on a resumed run, which may have final repeats too
SCREENED = ("screen", "reference")
NO_OFF = ("speculation cannot be turned off inside one EAGLE server: a 0-step tier still runs a 1-node verify and "
          "the draft extend, under EAGLE's request cap (eagle_worker_v2.py:1469-1504, speculative_hook.py:1086-1094), "
          "so off's cell fills no tier")


@dataclass(frozen=True)
class LevelWinner:
    """What the chosen profile's tiers run at one concurrency level: the EAGLE measurement whose steps the level's
    tier holds, its tok/s there, the tier key the level's batches route to, and off's tok/s where off was faster."""

    level: int
    label: str
    steps: int
    tokps: float
    key: int = 0  # the tier key SGLang routes this level's batches to (0: not keyed yet)
    off_tokps: float | None = None  # off's tok/s here when it beat every EAGLE measurement (it fills no tier)
    shared: tuple[int, ...] = ()  # the other levels routed to the same tier

    def to_json(self) -> JsonObject:
        out: JsonObject = {"concurrency": self.level, "label": self.label, "steps": self.steps,
                               "tokps": self.tokps, "tier": self.key}
        if self.off_tokps is not None:
            out["off_tokps"] = self.off_tokps
        if self.shared:
            out["shares_tier_with"] = list(self.shared)
        return out


@dataclass(frozen=True)
class AdaptivePlan:
    """What `build` found: the per-level steps, the tiers written from them and the candidate, or why none."""

    profile: str | None = None
    winners: tuple[LevelWinner, ...] = ()
    tiers: AdaptiveTiers | None = None
    predicted: float | None = None  # geometric mean over the levels of the tok/s each level's tier was measured at
    best_static: float | None = None  # the same of the best single static EAGLE point of that profile
    reason: str = ""  # why no candidate, when none
    refused: str = ""  # the server's reason (POST /check), when it refused the candidate
    by_profile: dict[str, float] = field(default_factory=dict)  # each profile's promise
    routing: Routing = field(default_factory=Routing)  # how SGLang routes batches to tiers (keys)
    measured: Mapping[str, Mapping[int, float]] = field(default_factory=dict, compare=False, repr=False)
    off: Mapping[int, float] = field(default_factory=dict, compare=False, repr=False)  # the profile's off cell

    @property
    def candidate(self) -> Candidate | None:
        if self.tiers is None or self.profile is None or self.refused:
            return None
        return Candidate(self.profile, ADAPTIVE_SPEC, tiers=self.tiers)

    @property
    def off_faster(self) -> list[int]:
        """The levels where off beat every EAGLE measurement (and still fills no tier)."""
        return [w.level for w in self.winners if w.off_tokps is not None]

    def routed(self, routing: Routing) -> AdaptivePlan:
        """The plan with its tiers keyed for `routing` (the plan's capture list and request cap), from the same
        measurements and profile."""
        if self.profile is None or not self.measured:
            return replace(self, routing=routing)
        return _plan_for(self.profile, self.measured, self.off, sorted({w.level for w in self.winners}), routing,
                         self.by_profile)

    def describe(self) -> str:
        notes = self._notes()
        if self.candidate is None:
            return f"adaptive: no candidate ({self.refused or self.reason})" + "".join(f"; {n}" for n in notes)
        assert self.tiers is not None
        won = ", ".join(f"{w.level}: {w.label} ({w.tokps:.1f} tok/s)" for w in self.winners)
        lead = f"; a single point's best {self.best_static:.1f}" if self.best_static else ""
        return (f"adaptive: per-level EAGLE steps {won}; tiers {self.tiers.text()} (steps per padded batch size, "
                f"{self._routing_words()}) -> {self.candidate.label}, predicted {self.predicted:.1f} tok/s (geometric "
                f"mean{lead}); it joins the final" + "".join(f"; {n}" for n in notes))

    def _routing_words(self) -> str:
        r = self.routing
        cap = f"request cap {r.running}" if r.running else "no request cap known"
        pad = f"padded to --cuda-graph-bs-decode {list(r.capture)}" if r.capture else "no capture list to pad to"
        return f"{pad}, {cap}"

    def _notes(self) -> list[str]:
        out = []
        if self.off_faster:
            out.append(f"off was faster at concurrency {', '.join(map(str, self.off_faster))}, which keep the best "
                       f"EAGLE steps measured there: {NO_OFF}")
        groups = {w.key: (w.level, *w.shared) for w in self.winners if w.shared}
        for key, group in sorted(groups.items()):
            steps = next(w.steps for w in self.winners if w.key == key)
            out.append(f"concurrency {', '.join(map(str, sorted(group)))} route to one tier ({key}): it holds {steps} "
                       "steps, the best geometric mean over them")
        return out

    def to_json(self) -> JsonObject:
        cand = self.candidate
        written = self.tiers if cand is not None else None  # tiers the server refused are never written
        return {
            "profile": self.profile, "label": cand.label if cand else None,
            "per_level_winners": [w.to_json() for w in self.winners],
            "tiers": written.to_json() if written else None,
            "config": written.sglang_config() if written else None,
            "refused_tiers": self.tiers.to_json() if self.tiers and self.refused else None,
            "routing": self.routing.to_json(),
            "off_faster": self.off_faster, "notes": self._notes(),
            "predicted_tokps": self.predicted, "best_static_tokps": self.best_static,
            "reason": self.reason or None, "refused": self.refused or None, "by_profile": self.by_profile,
        }


async def checked(plan: AdaptivePlan, control: ControlClient) -> tuple[AdaptivePlan, str | None]:
    """The plan once the server has judged its candidate: first its tiers keyed for the plan's own routing (the
    flags of the profile's eagle3-adaptive plan, POST /check without tiers), then that candidate checked as a switch
    would validate it (POST /check with `adaptive_tiers`: every plan rule with the host facts; an error refuses).
    (plan, the digest it would run), or (the plan refused with the server's reason, None)."""
    cand = plan.candidate
    if cand is None:
        return plan, None
    own = await control.check(cand.profile, ADAPTIVE_SPEC, None, None)
    if own.ok and own.plan is not None:
        plan = plan.routed(Routing.from_flags([str(f) for f in own.plan.flags]))
        cand = plan.candidate
        if cand is None:
            return plan, None
    answer = await control.check(cand.profile, cand.spec, cand.switch_point(), cand.tiers_json())
    if answer.ok and answer.digest is not None:
        return plan, answer.digest
    return replace(plan, refused=f"the server refuses {cand.label}: HTTP {answer.code} {answer.error}"), None


def summary_lines(data: JsonObject, chosen: str | None) -> list[str]:
    """tune.json's `adaptive` as the lines the tune's summary prints: what each level runs, the tiers written and
    how the decision went for them (`chosen`: the label the decision picked, or None)."""
    out = []
    for w in data.get("per_level_winners") or []:
        tier = f" (tier {w['tier']})" if w.get("tier") and w["tier"] != w["concurrency"] else ""
        line = (f"adaptive: concurrency {w['concurrency']}: {w['label']} ({w['tokps']:.1f} tok/s) -> steps "
                f"{w['steps']}{tier}")
        if w.get("off_tokps") is not None:
            line += f"; off was faster ({w['off_tokps']:.1f} tok/s) but fills no tier"
        out.append(line)
    if data.get("off_faster"):
        out.append(f"adaptive: {NO_OFF}")
    label = data.get("label")
    if label is None:
        out.append(f"adaptive: no candidate: {data.get('refused') or data.get('reason')}")
        return out
    tiers = ",".join(f"{b}:{'/'.join(map(str, steps))}" for b, steps in data["tiers"].items())
    out.append(f"adaptive: tiers written {tiers} (padded batch size:steps; the --speculative-adaptive-config file "
               "is tune.json's adaptive.config)")
    verdict = "won: the written profile carries it" if chosen == label else f"did not win ({chosen or 'nothing'} chosen)"
    out.append(f"adaptive: {label} {verdict}")
    return out


def sharing_a_cell(plan: AdaptivePlan, others: Sequence[Candidate]) -> AdaptivePlan:
    """The plan, or the plan with no candidate when its bundle cell would be another candidate's. A bundle names
    a cell by profile, spec and point (bench/bundle/names.py), not by tiers, so an adaptive candidate with the
    same starting point as the running plan's own tiers (a tune after an --apply of an adaptive winner, say)
    would write over that cell's files; it is left out, and the reason names the cell."""
    cand = plan.candidate
    if cand is None:
        return plan
    name = bundle_names.cell_name(cand.profile, cand.spec, cand.switch_point())
    for other in others:
        if other.label != cand.label and bundle_names.cell_name(other.profile, other.spec, other.switch_point()) == name:
            return replace(plan, reason=f"{cand.label} would share the bundle cell {name} with {other.label}, whose "
                                        "tiers differ (a bundle names a cell by its starting point, not its tiers): "
                                        "not measured; switch production to another plan first, or give --eagle3 "
                                        "points whose winners start elsewhere", tiers=None)
    return plan


def tier_steps(cand: Candidate, level: int | None = None, routing: Routing | None = None) -> int | None:
    """The EAGLE steps a measurement of `cand` at `level` ran, when they are fixed: S for a top-k 1 EAGLE-3 point;
    for an eagle3-adaptive plan with tiers, the one step of the tier `level`'s batches route to (0 included: a
    measured 0-step EAGLE pass); None otherwise, `off` included: it never fills a tier (module docstring)."""
    if cand.spec == "eagle3" and cand.point is not None and cand.point.topk == 1:
        return cand.point.steps
    if cand.spec == ADAPTIVE_SPEC and cand.tiers is not None and level is not None:
        steps = (routing or Routing()).steps_for(cand.tiers, level)
        return steps[0] if len(steps) == 1 else None
    return None


def _steps(label: str, level: int, routing: Routing) -> int | None:
    return tier_steps(Candidate.parse(label), level, routing)


def build(cells: Ledger, candidates: Sequence[Candidate], levels: Sequence[int],
          routing: Routing | None = None) -> AdaptivePlan:
    """The adaptive plan from the candidates measured so far (module docstring). `routing`: how the server routes
    batches to tiers, when known (`checked` re-keys the tiers with the plan's own)."""
    routing = routing or Routing()
    levels = sorted(set(levels))
    measured: dict[str, dict[str, dict[int, float]]] = {}  # profile -> EAGLE label -> level -> tok/s
    offs: dict[str, dict[int, float]] = {}  # profile -> level -> off's tok/s
    for cand in dict.fromkeys(candidates):
        if cells.failure(cand.label):
            continue
        if cand.spec == "off":
            offs[cand.profile] = level_means(cells.entries_of(cand.label, SCREENED))
            continue
        if not any(tier_steps(cand, level, routing) is not None for level in levels):
            continue
        got = level_means(cells.entries_of(cand.label, SCREENED))
        got = {lv: v for lv, v in got.items() if lv in levels and tier_steps(cand, lv, routing) is not None}
        if got:
            measured.setdefault(cand.profile, {})[cand.label] = got
    complete = {p: by for p, by in measured.items() if all(any(lv in m for m in by.values()) for lv in levels)}
    if not complete:
        return AdaptivePlan(reason="no profile has a correct top-k 1 EAGLE-3 point (or an adaptive plan of fixed "
                                   f"steps) measured at every concurrency level {levels}; {NO_OFF}")
    plans = {p: _plan_for(p, by, offs.get(p, {}), levels, routing, {}) for p, by in complete.items()}
    promise = {p: pl.predicted or 0.0 for p, pl in plans.items()}
    profile = max(promise, key=lambda p: promise[p])
    return replace(plans[profile], by_profile=promise)


def _geomean_at(m: Mapping[int, float], group: Iterable[int]) -> float:
    return geomean(m[lv] for lv in group)


def _plan_for(profile: str, measured: Mapping[str, Mapping[int, float]], off: Mapping[int, float],
              levels: Sequence[int], routing: Routing, by_profile: dict[str, float]) -> AdaptivePlan:
    """One profile's plan: the levels grouped by the tier key SGLang routes them to, each group's tier holding the
    steps of the EAGLE measurement with the best geometric mean over the group's levels."""
    # only what ran fixed steps under this routing (an adaptive plan's tier may hold several steps at a level)
    measured = {lb: fixed for lb, m in measured.items()
                if (fixed := {lv: v for lv, v in m.items() if _steps(lb, lv, routing) is not None})}
    if not all(any(lv in m for m in measured.values()) for lv in levels):
        return AdaptivePlan(profile=profile, by_profile=by_profile, routing=routing,
                            reason=f"{profile} has no EAGLE measurement of fixed steps at every concurrency level "
                                   f"{list(levels)}; {NO_OFF}")
    groups: dict[int, list[int]] = {}
    for level in levels:
        groups.setdefault(routing.key(level), []).append(level)
    winners: list[LevelWinner] = []
    for key, group in sorted(groups.items()):
        full = [lb for lb, m in measured.items() if all(lv in m for lv in group)
                and len({_steps(lb, lv, routing) for lv in group}) == 1]
        if not full:  # no measurement spans the group: each level's own best, the highest level's steps serve all
            full = [max((lb for lb, m in measured.items() if group[-1] in m), key=lambda lb: measured[lb][group[-1]])]
        label = max(full, key=lambda lb: _geomean_at(measured[lb], [lv for lv in group if lv in measured[lb]]))
        for level in group:
            tokps = measured[label].get(level, 0.0)
            best = max(m[level] for m in measured.values() if level in m)
            off_here = off.get(level)
            winners.append(LevelWinner(level, label, _steps(label, group[-1], routing) or 0, tokps, key,
                                       off_here if off_here is not None and off_here > best else None,
                                       tuple(lv for lv in group if lv != level)))
    winners.sort(key=lambda w: w.level)
    statics = [m for lb, m in measured.items() if Candidate.parse(lb).spec == "eagle3" and all(lv in m for lv in levels)]
    found = AdaptivePlan(profile=profile, winners=tuple(winners), predicted=geomean(w.tokps for w in winners),
                         best_static=max((_geomean_at(m, levels) for m in statics), default=None),
                         by_profile=by_profile, routing=routing, measured=measured, off=off)
    if off and all(level in off and off[level] > max(m[level] for m in measured.values() if level in m)
                   for level in levels):
        return replace(found, reason=f"off is faster than every EAGLE measurement at every level on {profile}: "
                                      f"speculation pays nowhere, and {NO_OFF}")
    if len({w.steps for w in winners}) == 1:
        return replace(found, reason=f"{winners[0].label} serves every tier ({winners[0].steps} steps at "
                                      "every level): that static point is the adaptive plan already")
    try:
        tiers = from_levels({w.level: w.steps for w in winners}, routing)
    except UserError as exc:
        return replace(found, reason=str(exc))
    return replace(found, tiers=tiers)
