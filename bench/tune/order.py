"""Which candidate to measure first, how much time there is, and what to measure next.

**Order.** Each candidate gets a predicted tok/s from the cost model (bench/predict/model.py) and the
candidates are measured highest prediction first; equal predictions keep the space's order (stable
sort). Per step, with the all-reduce latency `us(tokens)` of the candidate's profile read from a
`bench allreduce` result at the message size tokens × hidden × 2 B (the p50 curve of that profile,
else the profile-less NCCL curve, else the first one: `bench predict --bundle`'s choice), or
`Priors.allreduce_us` when there is no such file:

    off:    1000 / verify_ms(compute, n, us(1))                                  (one token per step)
    ngram:  accept(a_ngram, D - 1) / verify_ms(compute·(1 + g·(D-1)), n, us(D), b) × 1000
    eagle3: accept(a_eagle, S)     / (S·draft_step + verify_ms(compute·(1 + g·(D-1)), n, us(D), b)) × 1000
    n: the target forward's collectives and b: the verify's broadcasts, both from
       bench.predict.model.step_collectives (the count `bench predict` uses): n = 1 + 2 × layers + 1
       (layers from the checked plan: its --model-path's config.json when readable here, else its model
       overlay's model, else 61; 124 for 61), b = 3 when the tune's --temperature > 0 (0 for off, and at
       temperature 0); a broadcast is priced at us(D) unless Priors.broadcast_us says otherwise.
    accept(a, L) = (1 - a^(L+1)) / (1 - a)   (the root plus a chain of L proposals, each kept with
                                              probability a while all before it were)

The priors are rough (Priors' docstring says where each comes from); they only order the work, they
never decide: the decision is measured (bench/tune/decision.py).

**Budget.** `parse_budget("20m" | "3h" | "90s" | "1h30m")` -> seconds (exit 2 on anything else or 0).
Every cell costs one switch (drain, restart, health gate, warm-up) plus its repeats. Once a switch has
been timed (from /status history before the first switch, else the first one), `minimum` is the
smallest honest tune: the references left, one screening cell for every profile (`breadth_first` puts
each profile's most promising candidate first), and the final in its blocks (bench/tune/schedule.py);
a budget that cannot hold it is exit 2, naming the budget that would and the flags that lower it.

**Successive halving** (`next_batch`, pure: the state is the results so far, so a resumed tune plans
the same next batch). Round r asks every survivor for `screen_repeats · 2^r` repeats in all. Round 0's
survivors are all candidates; when a round is complete, the better half (ceil(n/2)) by mean tok/s of
their screening repeats go on (`screen_mean`: a lower bound would drop the best for one disturbed repeat).
Failed cells (server failed, rolled back, invalid, or wrong by the correctness gate) drop out and are
never measured again. Halving stops once at most `finalists` (2) remain: the final's blocked
comparison with the running plan takes over (bench/tune/schedule.py). A batch never costs more than the remaining budget:
cells are added in promise order while `switch_s + repeats · repeat_s` still fits, the rest wait, and
a round that cannot be finished ends the halving ("budget").
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.predict import model
from bench.tune import schedule
from bench.tune.space import Candidate
from launcher.errors import UserError


@dataclass(frozen=True)
class Priors:
    """What the model assumes where nothing was measured.

    compute_ms 6.0 and allreduce_us 50 over the 124 collectives of a 61-layer forward (1 embedding
    all-reduce, 2 per layer, 1 logits all-gather: model.step_collectives) give a 12.2 ms decode step, the
    82 tok/s measured without speculation on the target host (README). draft_step_ms
    1.0: one draft-model layer per step. Acceptance 0.7 (EAGLE-3) and 0.4 (n-gram) are rough figures for
    chat output; g = 0.02: each extra verified token adds 2% to verify compute at batch 1."""

    compute_ms: float = 6.0
    layers: int = model.DEFAULT_LAYERS
    layers_source: str = f"default {model.DEFAULT_LAYERS}"
    temperature: float = 0.0  # the tune's --temperature: above 0 a verify adds the sampling broadcasts
    tp: int = 8
    allreduce_us: float = 50.0
    broadcast_us: float | None = None  # None: what an all-reduce costs at the verify size
    draft_step_ms: float = 1.0
    accept_eagle3: float = 0.7
    accept_ngram: float = 0.4
    ngram_draft_tokens: int = 4  # profiles/spec/ngram.toml
    token_compute_growth: float = 0.02
    hidden: int = 7168
    elem_bytes: int = 2  # bf16

    def collectives(self, speculative: bool) -> model.Collectives:
        """The step's collectives: the same count `bench predict` uses (model.step_collectives)."""
        return model.step_collectives(self.layers, self.temperature, layers_source=self.layers_source, tp=self.tp,
                                      speculative=speculative)


def priors_for(plan: Mapping | None, temperature: float = 0.0, base: Priors = Priors()) -> Priors:
    """The priors with the model and the TP size of a checked plan (POST /check's `plan`), and the tune's
    temperature: the layers from the plan's --model-path config.json when readable here, else from its model
    overlay's model, else 61."""
    flags = plan.get("flags") if isinstance(plan, Mapping) else None
    flags = [str(f) for f in flags] if isinstance(flags, list) else []

    def flag(name: str) -> str | None:
        return flags[flags.index(name) + 1] if name in flags and flags.index(name) + 1 < len(flags) else None

    overlay = plan.get("model_overlay") if isinstance(plan, Mapping) else None
    layers, source = model.model_layers(overlay=overlay if isinstance(overlay, str) else None,
                                        model_path=flag("--model-path"))
    tp = base.tp
    try:
        tp = int(flag("--tp-size") or flag("--tp") or tp)
    except ValueError:
        pass
    return replace(base, layers=layers, layers_source=source, temperature=temperature, tp=tp)


def expected_accept(rate: float, proposals: int) -> float:
    """Tokens emitted per step: the root plus a chain of `proposals`, each kept with probability `rate`."""
    if rate >= 1.0:
        return proposals + 1.0
    return (1.0 - rate ** (proposals + 1)) / (1.0 - rate)


@dataclass(frozen=True)
class Prediction:
    candidate: Candidate
    tokps: float
    verify_ms: float
    accept_len: float
    allreduce_us: float
    allreduce_source: str


def _allreduce_at(profile: str, tokens: int, curves: Sequence, priors: Priors) -> tuple[float, str]:
    if not curves:
        return priors.allreduce_us, f"default {priors.allreduce_us:g} µs (no bench allreduce result)"
    match = [c for c in curves if c.profile == profile] or [c for c in curves if not c.profile and c.backend == "nccl"]
    curve = (match or list(curves))[0]
    size = tokens * priors.hidden * priors.elem_bytes
    us, how = curve.at(size)
    return us, f"{curve.label}: {us:.1f} µs at {size} B ({how})"


def predict(candidate: Candidate, curves: Sequence = (), priors: Priors = Priors()) -> Prediction:
    """The cost model's tok/s for one candidate at concurrency 1."""
    if candidate.spec == "eagle3":
        assert candidate.point is not None
        tokens, proposals = candidate.point.draft_tokens, candidate.point.steps
        draft_ms, rate = candidate.point.steps * priors.draft_step_ms, priors.accept_eagle3
    elif candidate.spec == "ngram":
        tokens, proposals, draft_ms, rate = priors.ngram_draft_tokens, priors.ngram_draft_tokens - 1, 0.0, priors.accept_ngram
    else:
        tokens, proposals, draft_ms, rate = 1, 0, 0.0, 0.0
    us, source = _allreduce_at(candidate.profile, tokens, curves, priors)
    compute = priors.compute_ms * (1.0 + priors.token_compute_growth * (tokens - 1))
    coll = priors.collectives(speculative=candidate.spec != "off")
    verify = model.verify_ms(compute, coll.decode, us, broadcasts=coll.verify, broadcast_us=priors.broadcast_us)
    accept = expected_accept(rate, proposals) if candidate.spec != "off" else 1.0
    return Prediction(candidate, model.spec_tokps(accept, draft_ms, verify), verify, accept, us, source)


def load_curves(allreduce_json: str | Path | None) -> list:
    """The all-reduce curves of a `bench allreduce --out DIR` result (DIR or DIR/allreduce.json); none without."""
    if allreduce_json is None:
        return []
    from bench.predict.measured import load_allreduce_curves

    path = Path(allreduce_json)
    return load_allreduce_curves(path / "allreduce.json" if path.is_dir() else path)


def rank(candidates: Sequence[Candidate], curves: Sequence = (), priors: Priors = Priors()) -> list[Prediction]:
    """Most promising first: predicted tok/s descending, ties in the given order."""
    preds = [predict(c, curves, priors) for c in candidates]
    return sorted(preds, key=lambda p: -p.tokps)  # sorted() is stable


_UNIT_S = {"h": 3600, "m": 60, "s": 1}


def parse_budget(text: str) -> float:
    """`20m`, `3h`, `90s`, `1h30m` -> seconds; exit 2 on anything else or a zero budget."""
    raw = text.strip().lower()
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", raw)
    if not raw or not m:
        raise UserError(f"--budget '{text[:40]}' is not a duration: write e.g. 90s, 20m, 3h or 1h30m")
    seconds = sum(int(v) * _UNIT_S[u] for v, u in zip(m.groups(), "hms", strict=True) if v)
    if seconds <= 0:
        raise UserError(f"--budget '{text[:40]}' is zero: give the time the tune may take, e.g. 3h")
    return float(seconds)


def cell_cost_s(switch_s: float, repeat_s: float, repeats: int) -> float:
    """One cell: its switch (drain, restart, health gate, warm-up) and its repeats."""
    return switch_s + repeats * repeat_s


def breadth_first(ordered: Sequence[Candidate]) -> list[Candidate]:
    """Every profile's most promising candidate first (in promise order), then the rest in promise order: a
    budget that ends round 0 early has still screened every profile the user named."""
    firsts: dict[str, Candidate] = {}
    for c in ordered:
        firsts.setdefault(c.profile, c)
    head = list(firsts.values())
    return head + [c for c in ordered if all(c is not f for f in head)]


@dataclass(frozen=True)
class Minimum:
    """The smallest honest tune at the measured costs: the references left, one screening cell per profile
    not screened yet, then the final (bench/tune/schedule.py)."""

    seconds: float
    references: int
    profiles: int
    final_arms: int
    final_switches: int

    def problem(self, remaining_s: float, budget_s: float, switch_s: float, repeat_s: float) -> str | None:
        if remaining_s >= self.seconds:
            return None
        spent = budget_s - remaining_s
        need = math.ceil(self.seconds + spent)
        return (f"--budget: {budget_s:.0f} s cannot hold the smallest honest tune at the measured costs (a switch "
                f"{switch_s:.1f} s, a repeat {repeat_s:.1f} s): {self.references} reference cell(s), one screening "
                f"cell for each of {self.profiles} profile(s), and a final of {self.final_arms} arms in "
                f"{self.final_switches} switches need {self.seconds:.0f} s more (after {spent:.0f} s spent); give "
                f"--budget {need}s or more, or lower it with --final-repeats, --screen-repeats, --finalists 1 or "
                "fewer --profiles")


def minimum(*, switch_s: float, repeat_s: float, references: int, profiles: int, screen_repeats: int,
            final_arms: int, final_repeats: int, blocks: int) -> Minimum:
    """What `Minimum` says, from the measured switch and repeat times."""
    runs = schedule.mirrored([f"arm{i}" for i in range(final_arms)], final_repeats, blocks) if final_arms > 1 else []
    cost = (references + profiles) * cell_cost_s(switch_s, repeat_s, screen_repeats)
    cost += schedule.cost_s(runs, switch_s, repeat_s)
    return Minimum(cost, references, profiles, final_arms, schedule.switches(runs))


# Student t, two-sided 95%, by degrees of freedom 1..30; 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95% confidence interval of the mean (Student t); one value is its own interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean
    df = len(values) - 1
    half = (_T975[df - 1] if df <= len(_T975) else 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def screen_mean(values: Sequence[float]) -> float:
    """What halving ranks by: the mean of the screening repeats (-inf without any). Not a lower bound: with 2
    repeats Student's t is 12.7, so one repeat a neighbour's burst of load slowed would drop the best candidate
    at once; a wild spread gets more repeats in the next round instead, and the final decides with its test."""
    return statistics.fmean(values) if values else -math.inf


@dataclass(frozen=True)
class CellState:
    """What is known of one candidate so far: tok/s per measured repeat, or that it failed."""

    tokps: tuple[float, ...] = ()
    failed: str | None = None  # why: "rolled back", "correctness: exact match 0.41 < 0.9", ...


@dataclass(frozen=True)
class Halving:
    screen_repeats: int = 2
    finalists: int = 2

    def target(self, rnd: int) -> int:
        return self.screen_repeats * 2**rnd


@dataclass(frozen=True)
class NextBatch:
    batch: list[tuple[Candidate, int]]  # (candidate, repeats to add now)
    round: int
    target_repeats: int
    survivors: list[Candidate]
    done: bool
    reason: str  # "measuring", "finalists", "budget", "nothing left"
    cost_s: float = 0.0
    dropped: dict[str, str] = field(default_factory=dict)  # label -> why it left the race


def next_batch(
    ordered: Sequence[Candidate],
    results: Mapping[str, CellState],
    *,
    remaining_s: float,
    switch_s: float,
    repeat_s: float,
    halving: Halving = Halving(),
) -> NextBatch:
    """The next cells to measure under successive halving (module docstring), within `remaining_s`."""
    dropped: dict[str, str] = {}

    def alive(cands: Sequence[Candidate]) -> list[Candidate]:
        out = []
        for c in cands:
            state = results.get(c.label, CellState())
            if state.failed:
                dropped.setdefault(c.label, f"failed: {state.failed}")
            else:
                out.append(c)
        return out

    survivors = alive(ordered)
    rnd = 0
    while True:
        target = halving.target(rnd)
        if not survivors:
            return NextBatch([], rnd, target, [], True, "nothing left", dropped=dropped)
        missing = [(c, target - len(results.get(c.label, CellState()).tokps)) for c in survivors]
        missing = [(c, n) for c, n in missing if n > 0]
        if missing:
            if len(survivors) <= halving.finalists and rnd > 0:
                return NextBatch([], rnd, target, survivors, True, "finalists", dropped=dropped)
            batch, cost = [], 0.0
            for c, n in missing:
                item = cell_cost_s(switch_s, repeat_s, n)
                if cost + item <= remaining_s:
                    batch.append((c, n))
                    cost += item
            if not batch:
                return NextBatch([], rnd, target, survivors, True, "budget", dropped=dropped)
            return NextBatch(batch, rnd, target, survivors, False, "measuring", cost, dropped)
        if len(survivors) <= halving.finalists:
            return NextBatch([], rnd, target, survivors, True, "finalists", dropped=dropped)
        keep = math.ceil(len(survivors) / 2)
        by_mean = sorted(survivors, key=lambda c: -screen_mean(results[c.label].tokps))
        for c in by_mean[keep:]:
            dropped[c.label] = f"round {rnd}: mean {screen_mean(results[c.label].tokps):.2f} tok/s not in the best {keep}"
        kept = set(id(c) for c in by_mean[:keep])
        survivors = alive([c for c in survivors if id(c) in kept])
        rnd += 1
