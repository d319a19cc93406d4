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

**Paired by prompt (reported, not part of the rule).** The rule's interval resamples repeats: it says how
sure the timing is on *these* prompts. Where the final's request rows are kept, `paired_by_prompt` adds, for
each correct finalist against the running plan, each prompt's request tok/s (output tokens / end-to-end
time, averaged over that prompt's final requests at the objective's concurrency) in one arm divided by the
other's, then the median of those per-prompt ratios with a percentile-bootstrap 95% interval that resamples
the *prompts* (seeded). It reads as "on a prompt like these, the finalist is x times as fast", and its width
shows how much the gain depends on which prompts are sent (with greedy EAGLE the accept length is nearly
fixed per prompt, so repeats alone cannot show that). It never changes the outcome: the winner rule, its
false-winner floor and its power are the ones above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from bench import JsonObject
from bench.client.request_record import RequestRecord

RESAMPLES = 10_000
CONFIDENCE = 0.95
MIN_REPEATS = 3  # fewer values per arm cannot be decided on (underpowered)
FINAL_REPEATS = 8  # the final's default repeats per arm
POWER_GAIN = 0.03  # the gain every decision states its power for
POWER_TARGET = 0.8
MIN_GAIN = 0.01  # a lead's interval must clear 1% of the other's mean


@dataclass(frozen=True)
class RequestTiming:
    ok: bool
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens: int


@dataclass(frozen=True)
class Repeat:
    """One measured repeat: its tok/s, wall time and (for goodput) each request's timings."""

    tokps: float
    duration_s: float
    requests: tuple[RequestTiming, ...] = ()


@dataclass(frozen=True)
class Objective:
    kind: Literal["tokps", "goodput"] = "tokps"
    concurrency: int = 1
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput_unit: Literal["req/s", "tok/s"] = "req/s"
    # `bench tune --adaptive`: tok/s judged across these concurrency levels at once, a repeat's value the geometric
    # mean of its tok/s at each (bench/tune/levels.py); () judges at `concurrency` alone
    levels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind == "goodput" and (self.ttft_ms is None or self.tpot_ms is None):
            raise ValueError("goodput needs both a TTFT and a TPOT target")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.levels and self.kind != "tokps":
            raise ValueError("an objective across concurrency levels is output tok/s")

    @property
    def unit(self) -> str:
        return "tok/s" if self.kind == "tokps" else f"goodput {self.goodput_unit}"

    def describe(self) -> str:
        if self.levels:
            return f"output tok/s, geometric mean over concurrency {', '.join(str(c) for c in self.levels)}"
        if self.kind == "tokps":
            return f"output tok/s at concurrency {self.concurrency}"
        return (f"goodput ({self.goodput_unit} of requests with TTFT ≤ {self.ttft_ms:g} ms and TPOT ≤ "
                f"{self.tpot_ms:g} ms) at concurrency {self.concurrency}")

    def value(self, rep: Repeat) -> float:
        if self.kind == "tokps":
            return rep.tokps
        return goodput(rep, self.ttft_ms or 0.0, self.tpot_ms or 0.0, self.goodput_unit)


def meets(req: RequestTiming, ttft_ms: float, tpot_ms: float) -> bool:
    if not req.ok or req.ttft_ms is None or req.ttft_ms > ttft_ms:
        return False
    return req.tpot_ms is None or req.tpot_ms <= tpot_ms


def goodput(rep: Repeat, ttft_ms: float, tpot_ms: float, unit: str = "req/s") -> float:
    """Requests/s (or their tok/s) of the repeat's requests that met both targets."""
    if rep.duration_s <= 0:
        return 0.0
    good = [r for r in rep.requests if meets(r, ttft_ms, tpot_ms)]
    amount = sum(r.output_tokens for r in good) if unit == "tok/s" else len(good)
    return amount / rep.duration_s


Arm = Sequence[float] | Sequence[Sequence[float]]  # values, or the values of each run (one switch each)


def runs_of(arm: Arm) -> list[np.ndarray]:
    """An arm as its runs: a flat list of values is one run per value (independent repeats); a list of lists
    is the repeats of each run, which share their switch and their stretch of time."""
    if len(arm) and all(isinstance(v, Sequence | np.ndarray) for v in arm):
        return [np.asarray(r, dtype=float) for r in arm if len(r)]  # type: ignore[arg-type]
    return [np.asarray([v], dtype=float) for v in arm]  # type: ignore[list-item]


def flat(arm: Arm) -> list[float]:
    return [float(v) for r in runs_of(arm) for v in r]


def _resampled_means(runs: list[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of `resamples` two-stage resamples: the arm's runs with replacement, then each chosen run's repeats
    with replacement. Repeats of one run share its switch and its stretch of time (a neighbour's burst of load,
    a server that came up a little slower), so they are not independent: resampling whole runs carries the
    spread between runs into the interval. With one value per run this is the plain bootstrap of the values.
    Deviations are widened by sqrt(k/(k-1)) over k runs (sqrt(n/(n-1)) over n repeats when there is one run)
    so their spread is the sample variance's, not the biased (k-1)/k of it."""
    sizes = np.array([len(r) for r in runs])
    centre = float(np.concatenate(runs).mean())
    within = np.stack([r[rng.integers(0, len(r), (resamples, len(r)))].mean(axis=1) for r in runs])  # k x R
    k = len(runs)
    if k == 1:
        n = int(sizes[0])
        return centre + (within[0] - centre) * (np.sqrt(n / (n - 1)) if n > 1 else 1.0)
    pick = rng.integers(0, k, (resamples, k))
    w = sizes[pick]
    means = (within[pick, np.arange(resamples)[:, None]] * w).sum(axis=1) / w.sum(axis=1)
    return centre + (means - centre) * np.sqrt(k / (k - 1))


def bootstrap_diff(a: Arm, b: Arm, *, seed: int = 0, resamples: int = RESAMPLES,
                   confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): percentile bootstrap interval of the difference of means, resampling
    each arm's runs, then their repeats (`_resampled_means`)."""
    ra, rb = runs_of(a), runs_of(b)
    rng = np.random.default_rng(seed)
    ma, mb = _resampled_means(ra, rng, resamples), _resampled_means(rb, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ma - mb, [tail, 100.0 - tail])
    return float(np.concatenate(ra).mean() - np.concatenate(rb).mean()), float(low), float(high)


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
class Power:
    """What the final could have found at the spread it measured (running plan against the best finalist)."""

    se: float  # standard error of the difference of means, in the objective's unit
    detectable_gain: float  # the gain (fraction of the running plan's mean) found 80% of the time
    power_at_gain: float  # how often a POWER_GAIN gain would be found
    gain: float = POWER_GAIN

    def describe(self) -> str:
        return (f"a {self.gain:.0%} gain would be found about {self.power_at_gain:.0%} of the time; "
                f"a {self.detectable_gain:.1%} gain 80% of the time")


def _var_of_mean(arm: Arm) -> float:
    """Variance of an arm's mean: from its run means when it has several runs, else from its repeats."""
    runs = runs_of(arm)
    if len(runs) > 1 and any(len(r) > 1 for r in runs):
        means = np.array([r.mean() for r in runs])
        return float(means.var(ddof=1) / len(runs))
    x = np.concatenate(runs) if runs else np.asarray([], dtype=float)
    return float(x.var(ddof=1) / len(x)) if len(x) > 1 else 0.0


def power(a: Arm, b: Arm, *, min_gain: float = MIN_GAIN, gain: float = POWER_GAIN) -> Power:
    """Power of the rule for arm `a` against the running plan `b` at their measured spread (normal approximation)."""
    se, mean = math.sqrt(_var_of_mean(a) + _var_of_mean(b)), float(np.mean(flat(b)))
    z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)
    if se <= 0 or mean <= 0:
        return Power(se, min_gain, 1.0 if gain > min_gain else 0.0, gain)
    detect = min_gain + (z + NormalDist().inv_cdf(POWER_TARGET)) * se / mean
    return Power(se, detect, NormalDist().cdf((gain - min_gain) * mean / se - z), gain)


@dataclass(frozen=True)
class PairedByPrompt:
    """One finalist against another arm, prompt by prompt (module docstring): the median of the per-prompt
    ratios contender/other of `metric`, and its bootstrap interval over prompts."""

    contender: str
    other: str
    metric: str
    prompts: int  # prompts measured in both arms
    median_ratio: float
    ci_low: float
    ci_high: float
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0

    def describe(self) -> str:
        return (f"paired by prompt ({self.prompts} prompts, {self.metric}): {self.contender} / {self.other} median "
                f"ratio {self.median_ratio:.3f} ({self.confidence:.0%} interval {self.ci_low:.3f}..{self.ci_high:.3f})")


PAIRED_METRIC = "request tok/s"


def per_prompt_tokps(rows: Sequence[RequestRecord], concurrency: int | None = None) -> dict[str, float]:
    """Prompt id -> the mean request tok/s (completion tokens / end-to-end seconds) of its successful requests,
    at `concurrency` when given; a prompt with no such request is left out."""
    got: dict[str, list[float]] = {}
    for r in rows:
        if concurrency is not None and (r.concurrency or 1) != concurrency:
            continue
        n, e2e = r.completion_tokens, r.e2e_s
        if not r.ok or not r.prompt_id or not n or not e2e or e2e <= 0:
            continue
        got.setdefault(r.prompt_id, []).append(float(n) / float(e2e))
    return {k: float(np.mean(v)) for k, v in got.items()}


def paired_by_prompt(contender: Mapping[str, float], other: Mapping[str, float], *, names: tuple[str, str] = ("a", "b"),
                     metric: str = PAIRED_METRIC, seed: int = 0, resamples: int = RESAMPLES,
                     confidence: float = CONFIDENCE) -> PairedByPrompt | None:
    """The median per-prompt ratio contender/other (prompt id -> value in each) with its percentile-bootstrap
    interval over the prompts both arms have (resampled with replacement, seeded; deviations widened by
    sqrt(n/(n-1)) as in `_resampled_means`); None with fewer than 2. With few prompts the interval is still a
    little narrow: it covered identical arms 90-93% of the time at 8 prompts, 94% at 16, 95% at 32
    (1,000 simulated pairs each)."""
    common = sorted(k for k in contender if k in other and other[k] > 0 and contender[k] > 0)
    if len(common) < 2:
        return None
    ratios = np.array([contender[k] / other[k] for k in common])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), (resamples, len(ratios)))
    centre = float(np.median(ratios))
    medians = centre + (np.median(ratios[idx], axis=1) - centre) * math.sqrt(len(ratios) / (len(ratios) - 1))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return PairedByPrompt(names[0], names[1], metric, len(common), centre, float(low), float(high),
                          resamples, confidence, seed)


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


def _compare(a: str, b: str, role: str, samples: Mapping[str, Arm], means: Mapping[str, float], *,
             seed: int, resamples: int, confidence: float, min_repeats: int, min_gain: float) -> Comparison:
    diff, low, high = bootstrap_diff(samples[a], samples[b], seed=seed, resamples=resamples, confidence=confidence)
    na, nb = len(flat(samples[a])), len(flat(samples[b]))
    enough = min(na, nb) >= min_repeats
    return Comparison(a, b, role, diff, low, high, na, nb, enough and low > max(0.0, min_gain * means[b]))


def decide(
    samples: Mapping[str, Arm],
    incumbent: str,
    *,
    rejected: Mapping[str, str] | None = None,
    objective: Objective = Objective(),
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
    rejected = dict(rejected or {})
    rule = RULE.format(unit=objective.unit, conf=confidence, resamples=resamples, seed=seed, min_repeats=min_repeats,
                       gain=min_gain, power_gain=POWER_GAIN, target=POWER_TARGET)
    means = {k: float(np.mean(flat(v))) for k, v in samples.items() if flat(v)}
    counts = {k: len(flat(v)) for k, v in samples.items()}
    correct = sorted((k for k in means if k not in rejected), key=lambda k: -means[k])
    base = dict(incumbent=incumbent, objective=objective.describe(), rule=rule, means=means, repeats=counts,
                rejected=rejected, resamples=resamples, confidence=confidence, seed=seed, min_gain=min_gain)
    contenders = [k for k in correct if k != incumbent]
    kw = dict(resamples=resamples, confidence=confidence, min_repeats=min_repeats, min_gain=min_gain)
    if incumbent_wrong:
        return _replace_wrong(samples, incumbent, contenders, means, fallback, base, seed=seed, **kw)
    if not contenders:
        return Decision("no correct candidate", incumbent, contender=None, runner_up=None, **base)
    best, runner_up = contenders[0], (contenders[1] if len(contenders) > 1 else None)
    if incumbent not in means:
        return Decision("underpowered", incumbent, contender=best, runner_up=runner_up,
                        reason="the running plan was not measured in the final", **base)
    vs_inc = [_compare(c, incumbent, "running plan", samples, means, seed=seed + i, **kw)
              for i, c in enumerate(contenders)]
    beats = [c.contender for c in vs_inc if c.significant]
    pw = power(samples[best], samples[incumbent], min_gain=min_gain)
    if beats:
        chosen = beats[0]
        among = [_compare(chosen, other, "runner-up", samples, means, seed=seed + 100 + i, **kw)
                 for i, other in enumerate(beats[1:])]
        tied = [c.other for c in among if not c.significant]
        return Decision("tie" if tied else "winner", chosen, contender=chosen, runner_up=runner_up,
                        comparisons=[*among, *vs_inc], tied=tied, power=pw, **base)
    short = [k for k in (best, incumbent) if counts[k] < min_repeats]
    if all(c.ci_high < 0 for c in vs_inc) and not short:
        outcome, reason = "worse", ""
    elif short or pw.power_at_gain < POWER_TARGET:
        outcome = "underpowered"
        reason = (f"{', '.join(short)} measured fewer than {min_repeats} times" if short
                  else "the spread measured is too wide to tell")
    else:
        outcome, reason = "no_gain", ""
    return Decision(outcome, incumbent, contender=best, runner_up=runner_up, comparisons=vs_inc, power=pw,
                    reason=reason, **base)


def _replace_wrong(samples: Mapping[str, Arm], incumbent: str, contenders: Sequence[str], means: Mapping[str, float],
                   fallback: str | None, base: dict[str, Any], *, seed: int, **kw: Any) -> Decision:
    """The running plan FAILed the gate: the fastest correct finalist, with its intervals against the others and
    against the wrong plan (where it was measured), else `fallback`; never the running plan."""
    why = base["rejected"].get(incumbent) or "wrong output"
    if not contenders:
        if fallback is None:
            raise ValueError("a wrong running plan with no correct finalist needs a fallback to choose")
        return Decision(RUNNING_PLAN_WRONG, fallback, contender=None, runner_up=None, reason=why, **base)
    best = contenders[0]
    comps = [_compare(best, other, "runner-up", samples, means, seed=seed + 100 + i, **kw)
             for i, other in enumerate(contenders[1:])]
    if incumbent in means:
        comps.append(_compare(best, incumbent, "running plan", samples, means, seed=seed, **kw))
    return Decision(RUNNING_PLAN_WRONG, best, contender=best, runner_up=contenders[1] if len(contenders) > 1 else None,
                    comparisons=comps, reason=why, **base)
