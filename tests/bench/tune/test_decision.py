"""bench/tune/decision.py: a winner only beyond noise, against the runner-up and the running plan."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from bench.client.request_record import RequestRecord
from bench.tune.bootstrap import bootstrap_diff, power
from bench.tune.decision import Decision, decide
from bench.tune.objective import Objective, Repeat, RequestTiming, goodput

N = 8  # interleaved repeats per arm: a sane final round


def _arms(rng, means, n=N, sd=3.0):
    return {k: [rng.gauss(m, sd) for _ in range(n)] for k, m in means.items()}


def test_bootstrap_is_seeded_and_covers_the_difference():
    a, b = [10.0, 11, 12, 13, 14, 15], [5.0, 6, 7, 8, 9, 10]
    assert bootstrap_diff(a, b, seed=3) == bootstrap_diff(a, b, seed=3)
    diff, low, high = bootstrap_diff(a, b, seed=3)
    assert diff == 5.0 and low < 5.0 < high and low > 0


@pytest.mark.parametrize("n", [8, 12])
def test_equal_distributions_give_no_winner_in_95_percent_of_seeds(n):
    seeds = 200
    false_winners = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        d = decide(_arms(rng, {"a": 100, "b": 100, "inc": 100}, n=n), "inc", seed=seed, resamples=2000)
        false_winners += d.outcome == "winner"
    assert false_winners / seeds <= 0.05


@pytest.mark.parametrize("n", [8, 12])
def test_contender_equal_to_the_running_plan_alone_wins_rarely(n):
    """No runner-up: one comparison, the looser case."""
    seeds = 200
    wins = sum(
        decide(_arms(random.Random(s), {"a": 100, "inc": 100}, n=n), "inc", seed=s, resamples=2000).outcome
        == "winner"
        for s in range(seeds)
    )
    assert wins / seeds <= 0.05


def test_a_clearly_faster_candidate_wins():
    for seed in range(20):
        rng = random.Random(seed)
        d = decide(_arms(rng, {"fast": 110, "mid": 100, "inc": 95}), "inc", seed=seed)
        assert d.outcome == "winner" and d.chosen == "fast"
        assert d.runner_up == "mid"
        fast = [c for c in d.comparisons if c.contender == "fast"]
        assert {c.role for c in fast} <= {"runner-up", "running plan"} and "running plan" in {c.role for c in fast}
        assert all(c.significant and c.ci_low > 0 for c in fast)


def test_finalists_that_tie_do_not_cancel_a_clear_win_over_production():
    """Both beat the running plan by 20%: a tie, reported, and the highest mean is picked."""
    rng = random.Random(1)
    arms = _arms(rng, {"a": 110, "b": 110, "inc": 90}, sd=0.5)
    d = decide(arms, "inc", seed=1)
    best, other = sorted(("a", "b"), key=lambda k: -sum(arms[k]))
    assert d.outcome == "tie" and d.chosen == best and d.tied == [other]
    assert [(c.role, c.significant) for c in d.comparisons] == [("runner-up", False), ("running plan", True),
                                                                 ("running plan", True)]
    assert "tied with" in d.summary() and d.chosen in d.summary()


def test_slower_everywhere_is_worse_and_a_wide_spread_is_underpowered():
    rng = random.Random(2)
    worse = decide(_arms(rng, {"a": 80, "b": 85, "inc": 100}, sd=1.0), "inc")
    assert worse.outcome == "worse" and worse.chosen == "inc"
    wide = decide(_arms(rng, {"a": 101, "inc": 100}, sd=15.0), "inc")
    assert wide.outcome == "underpowered" and wide.power.power_at_gain < 0.8
    assert "would be found about" in wide.summary()
    quiet = decide(_arms(rng, {"a": 100.2, "inc": 100}, sd=0.3), "inc")
    assert quiet.outcome == "no_gain" and quiet.power.power_at_gain > 0.99


def test_power_grows_with_repeats_and_shrinks_with_spread():
    rng = np.random.default_rng(0)
    a, b = 100 + rng.normal(0, 3, 8), 100 + rng.normal(0, 3, 8)
    a2, b2 = 100 + rng.normal(0, 3, 32), 100 + rng.normal(0, 3, 32)
    assert power(a2, b2).power_at_gain > power(a, b).power_at_gain
    assert power(a2, b2).detectable_gain < power(a, b).detectable_gain
    assert power([100.0] * 4, [100.0] * 4).power_at_gain == 1.0


def test_a_fast_but_wrong_cell_never_wins():
    for seed in range(20):
        rng = random.Random(seed)
        d = decide(_arms(rng, {"wrong": 200, "ok": 110, "inc": 95}), "inc", seed=seed,
                   rejected={"wrong": "correctness: exact match 0.40 < 0.9"})
        assert d.chosen != "wrong" and d.contender == "ok"
        assert d.rejected == {"wrong": "correctness: exact match 0.40 < 0.9"}
    only_wrong = decide(_arms(random.Random(0), {"wrong": 200, "inc": 95}), "inc",
                        rejected={"wrong": "rolled back"})
    assert only_wrong.outcome == "no correct candidate" and only_wrong.chosen == "inc"


def test_a_final_cut_short_decides_on_the_repeats_it_has():
    """A slot short is not a tie: 3 repeats that separate clearly still decide; 2 are underpowered."""
    rng = random.Random(0)
    few = decide(_arms(rng, {"fast": 150, "inc": 90}, n=3), "inc")
    assert few.outcome == "winner" and few.chosen == "fast"
    cut = decide({"fast": [150.0, 151.0], "inc": [90.0, 91.0, 90.5]}, "inc")
    assert cut.outcome == "underpowered" and "fewer than 3" in cut.reason
    unmeasured = decide(_arms(rng, {"fast": 150, "mid": 90}), "inc")
    assert unmeasured.outcome == "underpowered" and unmeasured.chosen == "inc" and "not measured" in unmeasured.reason


def test_decision_serialises_with_rule_and_numbers():
    d = decide(_arms(random.Random(0), {"fast": 110, "inc": 95}), "inc", seed=7)
    data = json.loads(json.dumps(d.to_json()))
    assert data["outcome"] == "winner" and data["seed"] == 7 and data["resamples"] == 10_000
    assert "percentile-bootstrap" in data["rule"] and "running plan stays" in data["rule"]
    assert 0 <= data["power"]["power_at_gain"] <= 1 and data["tied"] == []
    assert set(data["means"]) == {"fast", "inc"} and data["repeats"] == {"fast": N, "inc": N}
    assert data["comparisons"][0]["ci_low"] > 0
    assert isinstance(d, Decision)


def test_goodput_counts_requests_meeting_both_targets():
    reqs = (
        RequestTiming(ok=True, ttft_ms=100, tpot_ms=10, output_tokens=50),  # meets
        RequestTiming(ok=True, ttft_ms=300, tpot_ms=10, output_tokens=50),  # TTFT too slow
        RequestTiming(ok=True, ttft_ms=100, tpot_ms=30, output_tokens=50),  # TPOT too slow
        RequestTiming(ok=True, ttft_ms=100, tpot_ms=None, output_tokens=1),  # one token: TTFT alone
        RequestTiming(ok=False, ttft_ms=50, tpot_ms=5, output_tokens=0),  # failed
    )
    rep = Repeat(tokps=99.0, duration_s=2.0, requests=reqs)
    assert goodput(rep, 200, 20) == 1.0  # 2 requests / 2 s
    assert goodput(rep, 200, 20, "tok/s") == 25.5  # 51 tokens / 2 s
    obj = Objective("goodput", concurrency=16, ttft_ms=200, tpot_ms=20)
    assert obj.value(rep) == 1.0 and "TTFT ≤ 200 ms" in obj.describe()
    assert Objective().value(rep) == 99.0
    with pytest.raises(ValueError):
        Objective("goodput", ttft_ms=200)


def test_a_lead_below_the_minimum_gain_is_no_winner_however_quiet():
    """A 0.5% lead measured with almost no noise is resolved by the bootstrap but not worth a switch."""
    rng = np.random.default_rng(7)
    base = 100 + rng.normal(0, 0.01, 8)
    small = decide({"a": base * 1.005, "inc": base}, "inc")
    assert small.outcome == "no_gain" and small.comparisons[0].ci_low > 0
    assert decide({"a": base * 1.03, "inc": base}, "inc").outcome == "winner"
    assert decide({"a": base * 1.005, "inc": base}, "inc", min_gain=0.0).outcome == "winner"


def test_runs_not_repeats_are_the_unit_when_noise_comes_in_bursts():
    """Two runs of a finalist, one during a neighbour's quiet minute: as 8 independent repeats it 'wins'; as the
    runs they are, the interval holds the difference between runs and nothing wins."""
    rng = np.random.default_rng(3)
    a = [list(110 + rng.normal(0, 0.2, 4)), list(101 + rng.normal(0, 0.2, 4))]
    inc = [list(100 + rng.normal(0, 0.2, 4)), list(100 + rng.normal(0, 0.2, 4))]
    flat_decision = decide({"a": [v for r in a for v in r], "inc": [v for r in inc for v in r]}, "inc")
    assert flat_decision.outcome == "winner"
    by_run = decide({"a": a, "inc": inc}, "inc")
    assert by_run.outcome not in ("winner", "tie") and by_run.comparisons[0].ci_low < 1.0
    assert by_run.repeats == {"a": 8, "inc": 8} and abs(by_run.means["a"] - flat_decision.means["a"]) < 1e-9
    # runs of one repeat each are the plain bootstrap of the values
    vals = list(100 + rng.normal(0, 1, 8))
    assert bootstrap_diff([[v] for v in vals], [100.0] * 8, seed=1) == bootstrap_diff(vals, [100.0] * 8, seed=1)


def _prompt_rows(rng, base_tokps, gain=1.0, repeats=4, noise=0.03, concurrency=1):
    """Request rows of one arm: each prompt at its own speed (the accept length fixed per prompt), times `gain`."""
    rows = []
    for r in range(repeats):
        for pid, speed in base_tokps.items():
            tokps = speed * gain * rng.lognormvariate(0.0, noise)
            rows.append(RequestRecord(prompt_id=pid, ok=True, completion_tokens=256, e2e_s=256 / tokps,
                                      concurrency=concurrency, repeat=r))
    return rows


def test_paired_by_prompt_finds_a_real_per_prompt_gain():
    from bench.tune.paired import paired_by_prompt, per_prompt_tokps

    rng = random.Random(11)
    speeds = {f"p{i}": rng.uniform(60.0, 200.0) for i in range(16)}  # prompts differ far more than the gain
    fast = per_prompt_tokps(_prompt_rows(rng, speeds, gain=1.06))
    slow = per_prompt_tokps(_prompt_rows(rng, speeds))
    got = paired_by_prompt(fast, slow, names=("fast", "slow"), seed=5)
    assert got is not None and got.prompts == 16 and (got.contender, got.other) == ("fast", "slow")
    assert 1.0 < got.ci_low <= got.median_ratio <= got.ci_high
    assert abs(got.median_ratio - 1.06) < 0.03
    assert got == paired_by_prompt(fast, slow, names=("fast", "slow"), seed=5)  # seeded
    assert "median ratio 1.0" in got.describe()


def test_paired_by_prompt_of_identical_arms_covers_one():
    from bench.tune.paired import paired_by_prompt, per_prompt_tokps

    covered, trials = 0, 200
    for seed in range(trials):
        rng = random.Random(seed)
        speeds = {f"p{i}": rng.uniform(60.0, 200.0) for i in range(8)}
        a, b = per_prompt_tokps(_prompt_rows(rng, speeds)), per_prompt_tokps(_prompt_rows(rng, speeds))
        got = paired_by_prompt(a, b, seed=seed)
        assert got is not None
        covered += got.ci_low <= 1.0 <= got.ci_high
    assert covered >= 0.88 * trials  # a 95% interval, a little narrow at 8 prompts (about 93%, the docstring)


def test_per_prompt_tokps_keeps_the_objective_concurrency_and_successful_requests():
    from bench.tune.paired import paired_by_prompt, per_prompt_tokps

    rows = [{"prompt_id": "a", "ok": True, "completion_tokens": 100, "e2e_s": 1.0, "concurrency": 1},
            {"prompt_id": "a", "ok": True, "completion_tokens": 100, "e2e_s": 0.5, "concurrency": 1},
            {"prompt_id": "a", "ok": True, "completion_tokens": 100, "e2e_s": 9.0, "concurrency": 4},
            {"prompt_id": "b", "ok": False, "completion_tokens": None, "e2e_s": None, "concurrency": 1}]
    assert per_prompt_tokps([RequestRecord.model_validate(r) for r in rows], 1) == {"a": 150.0}
    assert paired_by_prompt({"a": 1.0}, {"a": 1.0}) is None  # one prompt cannot be resampled


def test_paired_by_prompt_is_reported_but_never_changes_the_outcome():
    from bench.tune.paired import PairedByPrompt

    rng = random.Random(3)
    d = decide(_arms(rng, {"prod": 100.0, "cand": 100.0}), "prod", seed=1)
    paired = PairedByPrompt("cand", "prod", "request tok/s", 8, 1.2, 1.1, 1.3)
    from dataclasses import replace
    with_pair = replace(d, paired_by_prompt=[paired])
    assert with_pair.outcome == d.outcome and with_pair.chosen == "prod"
    assert "paired by prompt (8 prompts" in with_pair.summary() and "paired" not in d.summary()
    assert json.loads(json.dumps(with_pair.to_json()))["paired_by_prompt"][0]["median_ratio"] == 1.2


def test_a_wrong_running_plan_never_stays_the_fastest_correct_finalist_is_chosen():
    rng = np.random.default_rng(3)
    samples = {"wrong+off": list(rng.normal(300, 3, 8)), "fast+off": list(rng.normal(200, 3, 8)),
               "baseline+off": list(rng.normal(100, 3, 8))}
    d = decide(samples, "wrong+off", rejected={"wrong+off": "wrong output: mean change 0.02"}, incumbent_wrong=True,
               fallback="baseline+off")
    assert (d.outcome, d.chosen, d.reason) == ("running_plan_wrong", "fast+off", "wrong output: mean change 0.02")
    vs = {(c.role, c.other): c for c in d.comparisons}
    assert vs[("runner-up", "baseline+off")].significant
    assert vs[("running plan", "wrong+off")].diff_mean < 0  # slower than the wrong plan, and chosen all the same
    assert "wrong+off FAILed the correctness gate" in d.summary() and "fast+off is chosen" in d.summary()


def test_a_wrong_running_plan_with_no_correct_finalist_falls_back_to_the_reference():
    samples = {"wrong+off": [300.0] * 4, "broken+off": [250.0] * 4}
    d = decide(samples, "wrong+off", rejected={"wrong+off": "wrong output", "broken+off": "wrong output"},
               incumbent_wrong=True, fallback="baseline+off")
    assert (d.outcome, d.chosen, d.contender) == ("running_plan_wrong", "baseline+off", None)
    with pytest.raises(ValueError):
        decide(samples, "wrong+off", rejected={"wrong+off": "x", "broken+off": "x"}, incumbent_wrong=True)
