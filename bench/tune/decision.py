"""The decision rule of `bench tune`: a finalist replaces the plan that was running when the tune started
only when it beats it beyond noise and by more than the floor; otherwise the running plan stays.

**Samples.** The finalists and the running plan are measured in blocks, mirrored (bench/tune/schedule.py:
A B C C B A, a few repeats per switch), so slow drift (thermals, a neighbour's job) lands on every arm
alike. Each repeat gives one objective value.

**Objective.** `tokps` (default): output tok/s of the repeat at concurrency 1, as `bench run`
measures it. `goodput`: at the given concurrency, the requests of a repeat that meet BOTH targets
(TTFT ≤ ttft_ms and TPOT ≤ tpot_ms; a request of one token, which has no TPOT, is judged on TTFT
alone; a failed request never meets them), counted as requests/s (`goodput_unit="req/s"`, the
default: finished-in-target requests / the repeat's wall time) or as tok/s (`"tok/s"`: their output
tokens / the repeat's wall time).

**Rule.** For every finalist that passed the correctness gate (a cell that failed the gate, or whose
server failed, is never chosen: it is listed with its reason), the percentile bootstrap 95% interval of
its mean minus the running plan's (each arm resampled in two stages, its runs, then each run's repeats,
since the repeats of one run share their switch and their stretch of time; deviations widened by
sqrt(k/(k-1)) so the interval is not too narrow at small k; 10,000 resamples, seeded). A finalist *beats*
the running plan when that interval's low end clears `min_gain` (1%) of the running plan's mean: a lead
must be worth a switch, so two setups that differ by less (identical ones whose tiny systematic
difference a quiet host resolves, for example) do not. Outcomes:

- `winner`: one finalist beats the running plan, and beats every other finalist that does by the same test;
- `tie`: several beat the running plan and cannot be told apart among themselves; the one with the highest
  mean is chosen (the data cannot rank them, the rule is deterministic) and the tie is reported. A tie
  among finalists never cancels a clear win over production;
- `worse`: every finalist is slower than the running plan (each interval wholly below 0);
- `underpowered`: nothing beats the running plan and the spread measured is too wide to tell: a gain of
  `POWER_GAIN` (3%) would be found less than 80% of the time (or an arm has fewer than `min_repeats`);
- `no_gain`: nothing beats the running plan although a 3% gain would have been found;
- `no correct candidate`: no finalist passed the gate;
- `running_plan_wrong`: the running plan itself FAILed the gate, so it cannot stay: the fastest finalist that
  passed is chosen (by mean, with its interval against the runner-up and against the wrong plan where measured),
  or, when none passed, `fallback` (the gate's reference, baseline under the running plan's spec mode).

A final cut short by the budget is decided on the repeats it has (at least `min_repeats`, 3, per arm),
with the power they give. **Power**: with SE the standard error of the difference at the measured spread,
a gain g is found with probability Φ((g - min_gain)·mean / SE - 1.96); every decision states the gain
found 80% of the time and how often a 3% gain would be found, so that "the running plan stays" is read
rightly. The false-winner rate and power of this rule under the blocked schedule are simulated in
tools/tune_schedule_sim.py (docs/tune.md).

**Paired by prompt** (bench/tune/paired.py) is reported beside the decision, never part of the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

from bench import JsonObject
from bench.tune.bootstrap import (
    CONFIDENCE,
    MIN_GAIN,
    POWER_GAIN,
    POWER_TARGET,
    RESAMPLES,
    Arm,
    Power,
    bootstrap_diff,
    flat,
    power,
)
from bench.tune.objective import Objective
from bench.tune.paired import PairedByPrompt

MIN_REPEATS = 3  # fewer values per arm cannot be decided on (underpowered)
FINAL_REPEATS = 8  # the final's default repeats per arm
TOKPS = Objective()  # the default objective: output tok/s at concurrency 1


@dataclass(frozen=True)
class Comparison:
    contender: str
    other: str
    role: str  # "runner-up" or "running plan"
    diff_mean: float
    ci_low: float
    ci_high: float
    n_contender: int
    n_other: int
    significant: bool


Outcome = Literal["winner", "tie", "worse", "underpowered", "no_gain", "no correct candidate", "running_plan_wrong"]
RUNNING_PLAN_WRONG: Outcome = "running_plan_wrong"
KEEPS = {"worse": "every finalist is slower than the running plan",
         "underpowered": "the spread measured is too wide to tell",
         "no_gain": "nothing beats the running plan by more than the floor",
         "no correct candidate": "no finalist passed the correctness gate"}



@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    chosen: str  # the winner, or the running plan that stays
    incumbent: str
    contender: str | None  # the best correct finalist by mean
    runner_up: str | None
    objective: str
    rule: str
    means: dict[str, float]
    repeats: dict[str, int]
    comparisons: list[Comparison] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # label -> why it cannot be chosen
    tied: list[str] = field(default_factory=list)  # with a tie: the finalists that tie with the chosen one
    power: Power | None = None
    reason: str = ""
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0
    min_gain: float = MIN_GAIN
    paired_by_prompt: list[PairedByPrompt] = field(default_factory=list)  # reported beside the rule, never in it

    def to_json(self) -> JsonObject:
        """As tune.json's `decision`."""
        return asdict(self)

    def summary(self) -> str:
        """One line: what was decided and why, with the power behind it (and, where the final kept its request
        rows, the pairing by prompt of the finalist named against the running plan)."""
        text = self._summary()
        named = self.chosen if self.outcome in ("winner", "tie") else self.contender
        paired = next((p for p in self.paired_by_prompt if p.contender == named and p.other == self.incumbent), None)
        return text + (f"; {paired.describe()}" if paired else "")

    def _summary(self) -> str:
        if self.outcome == RUNNING_PLAN_WRONG:
            lead = next((c for c in self.comparisons if c.contender == self.chosen and c.role == "runner-up"), None)
            text = f"{self.outcome}: {self.incumbent} FAILed the correctness gate ({self.reason}); {self.chosen} is chosen"
            text += (f", the fastest correct finalist ({self.means[self.chosen]:.1f}" if self.chosen in self.means
                     else ", the gate's reference (no finalist passed")
            if lead is not None:
                text += f"; +{lead.diff_mean:.1f}, 95% interval {lead.ci_low:.1f}..{lead.ci_high:.1f} over {lead.other}"
            return text + ")"
        if self.outcome in ("winner", "tie"):
            lead = next((c for c in self.comparisons if c.contender == self.chosen and c.role == "running plan"), None)
            text = f"{self.outcome}: {self.chosen}"
            if lead is not None:
                text += f" (+{lead.diff_mean:.1f}, 95% interval {lead.ci_low:.1f}..{lead.ci_high:.1f} over {self.incumbent})"
            if self.tied:
                text += f"; tied with {', '.join(self.tied)}, picked by the highest mean"
            return text
        text = f"{self.outcome}: {self.incumbent} stays ({self.reason or KEEPS.get(self.outcome, '')})"
        return text + (f"; {self.power.describe()}" if self.power else "")


RULE = (
    "a finalist beats the running plan when the {conf:.0%} percentile-bootstrap interval ({resamples} resamples, "
    "seed {seed}) of its mean {unit} minus the running plan's lies above {gain:.0%} of the running plan's mean, "
    "each arm with at least {min_repeats} repeats; of those that beat it, the best by mean wins unless another "
    "one cannot be told from it by the same test (a tie: the highest mean is picked); otherwise the running "
    "plan stays (worse, no_gain, or underpowered when a {power_gain:.0%} gain would be found less than "
    "{target:.0%} of the time)"
)



@dataclass(frozen=True)
class Bar:
    """What a lead must clear: the bootstrap's resamples and confidence, the repeats each arm needs, and the
    fraction of the other arm's mean the interval's low end must lie above."""

    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    min_repeats: int = MIN_REPEATS
    min_gain: float = MIN_GAIN

    def compare(self, a: str, b: str, role: str, samples: Mapping[str, Arm], means: Mapping[str, float], *,
                seed: int) -> Comparison:
        """Arm `a` against arm `b`: the interval of the difference of means, and whether `a` beats `b`."""
        diff, low, high = bootstrap_diff(samples[a], samples[b], seed=seed, resamples=self.resamples,
                                         confidence=self.confidence)
        na, nb = len(flat(samples[a])), len(flat(samples[b]))
        enough = min(na, nb) >= self.min_repeats
        return Comparison(a, b, role, diff, low, high, na, nb, enough and low > max(0.0, self.min_gain * means[b]))


def decide(
    samples: Mapping[str, Arm],
    incumbent: str,
    *,
    rejected: Mapping[str, str] | None = None,
    objective: Objective = TOKPS,
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    min_repeats: int = MIN_REPEATS,
    min_gain: float = MIN_GAIN,
    incumbent_wrong: bool = False,
    fallback: str | None = None,
) -> Decision:
    """Apply the rule (module docstring) to the final values per candidate label.

    `samples` holds the objective values of every finalist and of `incumbent` (the running plan), flat or as
    the values of each run (one switch each: `runs_of`);
    `rejected` names cells that failed the gate or their switch, with why: they are never chosen;
    `incumbent_wrong`: the running plan FAILed the gate, so the outcome is `running_plan_wrong` and the chosen
    plan the fastest correct finalist, else `fallback`."""
    rule = RULE.format(unit=objective.unit, conf=confidence, resamples=resamples, seed=seed, min_repeats=min_repeats,
                       gain=min_gain, power_gain=POWER_GAIN, target=POWER_TARGET)
    means = {k: float(np.mean(flat(v))) for k, v in samples.items() if flat(v)}
    counts = {k: len(flat(v)) for k, v in samples.items()}
    # the outcome with no correct finalist; every other outcome is this record with what it found
    base = Decision("no correct candidate", incumbent, incumbent, None, None, objective.describe(), rule, means, counts,
                    rejected=dict(rejected or {}), resamples=resamples, confidence=confidence, seed=seed,
                    min_gain=min_gain)
    correct = sorted((k for k in means if k not in base.rejected), key=lambda k: -means[k])
    contenders = [k for k in correct if k != incumbent]
    bar = Bar(resamples, confidence, min_repeats, min_gain)
    if incumbent_wrong:
        return _replace_wrong(base, samples, contenders, fallback, bar)
    if not contenders:
        return base
    return _against_running_plan(base, samples, contenders, bar)


def _against_running_plan(base: Decision, samples: Mapping[str, Arm], contenders: Sequence[str], bar: Bar) -> Decision:
    """The running plan passed the gate: the finalist that beats it (a winner, or a tie among those that do), else
    why it stays."""
    incumbent, means, seed = base.incumbent, base.means, base.seed
    best, runner_up = contenders[0], (contenders[1] if len(contenders) > 1 else None)
    if incumbent not in means:
        return replace(base, outcome="underpowered", contender=best, runner_up=runner_up,
                       reason="the running plan was not measured in the final")
    vs_inc = [bar.compare(c, incumbent, "running plan", samples, means, seed=seed + i) for i, c in enumerate(contenders)]
    beats = [c.contender for c in vs_inc if c.significant]
    pw = power(samples[best], samples[incumbent], min_gain=bar.min_gain)
    if beats:
        chosen = beats[0]
        among = [bar.compare(chosen, other, "runner-up", samples, means, seed=seed + 100 + i)
                 for i, other in enumerate(beats[1:])]
        tied = [c.other for c in among if not c.significant]
        return replace(base, outcome="tie" if tied else "winner", chosen=chosen, contender=chosen, runner_up=runner_up,
                       comparisons=[*among, *vs_inc], tied=tied, power=pw)
    short = [k for k in (best, incumbent) if base.repeats[k] < bar.min_repeats]
    outcome, reason = _why_it_stays(vs_inc, pw, short, bar.min_repeats)
    return replace(base, outcome=outcome, contender=best, runner_up=runner_up, comparisons=vs_inc, power=pw,
                   reason=reason)


def _why_it_stays(vs_inc: Sequence[Comparison], pw: Power, short: Sequence[str], min_repeats: int) -> tuple[Outcome, str]:
    """Nothing beats the running plan: every finalist slower (`worse`), too few repeats or too little power to tell
    (`underpowered`), or a gain it would have found is not there (`no_gain`); with the reason stated."""
    if all(c.ci_high < 0 for c in vs_inc) and not short:
        return "worse", ""
    if short:
        return "underpowered", f"{', '.join(short)} measured fewer than {min_repeats} times"
    if pw.power_at_gain < POWER_TARGET:
        return "underpowered", "the spread measured is too wide to tell"
    return "no_gain", ""


def _replace_wrong(base: Decision, samples: Mapping[str, Arm], contenders: Sequence[str], fallback: str | None,
                   bar: Bar) -> Decision:
    """The running plan FAILed the gate: the fastest correct finalist, with its intervals against the others and
    against the wrong plan (where it was measured), else `fallback`; never the running plan."""
    incumbent, means, seed = base.incumbent, base.means, base.seed
    why = base.rejected.get(incumbent) or "wrong output"
    if not contenders:
        if fallback is None:
            raise ValueError("a wrong running plan with no correct finalist needs a fallback to choose")
        return replace(base, outcome=RUNNING_PLAN_WRONG, chosen=fallback, reason=why)
    best = contenders[0]
    comps = [bar.compare(best, other, "runner-up", samples, means, seed=seed + 100 + i)
             for i, other in enumerate(contenders[1:])]
    if incumbent in means:
        comps.append(bar.compare(best, incumbent, "running plan", samples, means, seed=seed))
    return replace(base, outcome=RUNNING_PLAN_WRONG, chosen=best, contender=best,
                   runner_up=contenders[1] if len(contenders) > 1 else None, comparisons=comps, reason=why)
