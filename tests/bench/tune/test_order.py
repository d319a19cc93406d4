"""bench/tune/order.py: cost-model order, budget parsing and fit, the successive-halving planner."""

from __future__ import annotations

import json
import random

import pytest

from bench.tune.order import (
    CellState,
    Halving,
    Priors,
    breadth_first,
    cell_cost_s,
    load_curves,
    minimum,
    next_batch,
    parse_budget,
    predict,
    priors_for,
    rank,
    screen_mean,
)
from bench.tune.space import DEFAULT_POINTS, Candidate, build_space
from launcher.errors import UserError


def _allreduce_json(tmp_path, rows):
    (tmp_path / "allreduce.json").write_text(json.dumps(rows))
    return tmp_path


def _row(backend, profile, size, us):
    return {"backend": backend, "profile": profile, "nranks": 8, "graph": True, "type": "bf16", "size_B": size,
            "time_us": us, "status": "ok"}


def test_defaults_reproduce_the_target_hosts_decode_rate():
    off = predict(Candidate("baseline", "off"))
    # 1 embedding + 2 x 61 layers all-reduces + 1 logits all-gather = 124 collectives
    assert off.tokps == pytest.approx(1000 / (6.0 + 124 * 50 / 1000))  # 82.0 tok/s, README's 82
    assert "default 50" in off.allreduce_source


def test_collectives_follow_the_plans_model_and_the_temperature(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 27}))
    plan = {"flags": ["--model-path", str(tmp_path), "--tp-size", "8"], "model_overlay": "kimi-k2"}
    priors = priors_for(plan, 0.7)
    assert (priors.layers, priors.temperature) == (27, 0.7)  # config.json beats the overlay
    assert priors.collectives(speculative=True).decode == 1 + 2 * 27 + 1
    assert priors.collectives(speculative=True).verify == 3 and priors.collectives(speculative=False).verify == 0
    assert priors_for({"flags": ["--model-path", "/nowhere"], "model_overlay": "deepseek-v3"}).layers == 61
    assert priors_for({"flags": ["--tp-size", "1"]}).collectives(speculative=True).decode == 0
    eagle = rank([Candidate("baseline", "eagle3", DEFAULT_POINTS[0])])[0]
    hot = rank([Candidate("baseline", "eagle3", DEFAULT_POINTS[0])], priors=priors_for({}, 0.7))[0]
    assert hot.verify_ms - eagle.verify_ms == pytest.approx(3 * eagle.allreduce_us / 1000)
    off = rank([Candidate("baseline", "off")], priors=priors_for({}, 0.7))[0]
    assert off.verify_ms == pytest.approx(predict(Candidate("baseline", "off")).verify_ms)  # no verify, no broadcast


def test_rank_uses_each_profiles_measured_allreduce(tmp_path):
    size1, size4 = 1 * 7168 * 2, 4 * 7168 * 2
    folder = _allreduce_json(tmp_path, [
        _row("nccl", None, size1, 60.0), _row("nccl", None, size4, 70.0),
        _row("pcie-ipc", "custom-ar", size1, 10.0), _row("pcie-ipc", "custom-ar", size4, 12.0),
    ])
    curves = load_curves(folder)  # a folder or its allreduce.json
    cands = [Candidate("baseline", "off"), Candidate("custom-ar", "off")]
    ranked = rank(cands, curves)
    assert [p.candidate.profile for p in ranked] == ["custom-ar", "baseline"]
    assert ranked[0].allreduce_us == pytest.approx(10.0) and "custom-ar" in ranked[0].allreduce_source
    assert ranked[1].allreduce_us == pytest.approx(60.0)  # no curve of its own: the profile-less NCCL one


def test_rank_is_stable_on_ties_and_prefers_speculation_when_allreduce_is_cheap():
    cands, _ = build_space(["a", "b"], ["off", "eagle3"], DEFAULT_POINTS)
    ranked = rank(cands)
    labels = [p.candidate.label for p in ranked]
    assert labels.index("a+off") < labels.index("b+off")  # equal predictions keep the space's order
    cheap = rank(cands, priors=Priors(allreduce_us=5.0))
    assert cheap[0].candidate.spec == "eagle3"
    assert load_curves(None) == []


@pytest.mark.parametrize(("text", "seconds"), [("20m", 1200), ("3h", 10800), ("90s", 90), ("1h30m", 5400),
                                               (" 2H ", 7200)])
def test_budget_parses(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "20", "m", "1.5h", "-3h", "0m", "3d", "20m3h", "0h0m0s"])
def test_a_bad_budget_is_exit_2(text):
    with pytest.raises(UserError) as exc:
        parse_budget(text)
    assert exc.value.exit_code == 2


def test_minimum_holds_references_one_cell_per_profile_and_the_blocked_final():
    need = minimum(switch_s=300, repeat_s=60, references=2, profiles=3, screen_repeats=2, final_arms=3,
                   final_repeats=8, blocks=2)
    # 5 cells of 300 + 2x60, then the final A B C C B A: 5 switches and 24 repeats
    assert need.seconds == 5 * 420 + 5 * 300 + 24 * 60 and need.final_switches == 5
    assert need.problem(remaining_s=need.seconds, budget_s=9000, switch_s=300, repeat_s=60) is None
    text = need.problem(remaining_s=need.seconds - 1, budget_s=need.seconds + 99, switch_s=300, repeat_s=60)
    assert f"give --budget {int(need.seconds) + 100}s" in text and "--final-repeats" in text and "--finalists 1" in text
    assert "3 profile(s)" in text and "2 reference cell(s)" in text


def test_breadth_first_puts_every_profiles_best_first_in_promise_order():
    order = [Candidate("a", "off"), Candidate("a", "ngram"), Candidate("b", "off"), Candidate("a", "eagle3", None),
             Candidate("c", "ngram"), Candidate("b", "ngram")]
    out = breadth_first(order)
    assert [c.label for c in out[:3]] == ["a+off", "b+off", "c+ngram"]
    assert [c.label for c in out[3:]] == ["a+ngram", "a+eagle3", "b+ngram"] and len(out) == len(order)


def _space(n):
    return [Candidate(f"p{i}", "off") for i in range(n)]


def _simulate(cands, truth, *, budget, switch_s=100.0, repeat_s=30.0, sd=1.0, seed=0, halving=None):
    """Drive the planner as the CLI will: run each batch, charge its cost, until it says done."""
    rng = random.Random(seed)
    results: dict[str, CellState] = {}
    spent, calls = 0.0, []
    while True:
        nb = next_batch(cands, results, remaining_s=budget - spent, switch_s=switch_s, repeat_s=repeat_s,
                        halving=halving or Halving())
        calls.append(nb)
        if nb.done:
            return nb, results, spent, calls
        cost = sum(cell_cost_s(switch_s, repeat_s, n) for _, n in nb.batch)
        assert cost == pytest.approx(nb.cost_s)
        assert cost <= budget - spent + 1e-9, "a batch exceeded the remaining budget"
        spent += cost
        for c, n in nb.batch:
            old = results.get(c.label, CellState())
            results[c.label] = CellState(old.tokps + tuple(rng.gauss(truth[c.label], sd) for _ in range(n)))


def test_halving_screens_all_then_halves_to_two_finalists():
    cands = _space(8)
    truth = {c.label: 80.0 + 3 * i for i, c in enumerate(cands)}  # p7 fastest
    nb, results, spent, calls = _simulate(cands, truth, budget=1e9)
    assert nb.reason == "finalists"
    assert {c.label for c in nb.survivors} == {"p7+off", "p6+off"}
    assert [len(call.batch) for call in calls[:-1]] == [8, 4]  # round 0 all, round 1 half
    assert len(results["p7+off"].tokps) == 4 and len(results["p0+off"].tokps) == 2
    assert calls[1].dropped  # the dropped half is named with its bound


def test_planner_never_exceeds_the_budget_across_seeds():
    for seed in range(50):
        rng = random.Random(seed)
        cands = _space(rng.randint(1, 12))
        truth = {c.label: rng.uniform(50, 100) for c in cands}
        budget = rng.uniform(0, 5000)
        _, _, spent, _ = _simulate(cands, truth, budget=budget, switch_s=rng.uniform(10, 300),
                                   repeat_s=rng.uniform(5, 60), seed=seed)
        assert spent <= budget


def test_budget_cut_ends_with_reason_and_measures_in_promise_order():
    cands = _space(6)
    nb = next_batch(cands, {}, remaining_s=cell_cost_s(100, 30, 2) * 2.5, switch_s=100, repeat_s=30)
    assert [c.label for c, _ in nb.batch] == ["p0+off", "p1+off"] and not nb.done
    results = {c.label: CellState((90.0, 91.0)) for c, _ in nb.batch}
    nb2 = next_batch(cands, results, remaining_s=50, switch_s=100, repeat_s=30)
    assert nb2.done and nb2.reason == "budget"


def test_failed_cells_drop_out_and_are_never_planned_again():
    cands = _space(3)
    results = {"p0+off": CellState(failed="rolled back"), "p1+off": CellState((90.0, 90.5))}
    nb = next_batch(cands, results, remaining_s=1e9, switch_s=1, repeat_s=1)
    assert [(c.label, n) for c, n in nb.batch] == [("p2+off", 2)]
    assert nb.dropped == {"p0+off": "failed: rolled back"}
    everything_failed = {c.label: CellState(failed="x") for c in cands}
    assert next_batch(cands, everything_failed, remaining_s=1e9, switch_s=1, repeat_s=1).reason == "nothing left"


def test_halving_keeps_by_mean_so_one_disturbed_repeat_does_not_drop_the_best():
    cands = _space(4)
    results = {
        "p0+off": CellState((168.0, 148.7)),  # the best, one repeat slowed by a burst of load on the host
        "p1+off": CellState((156.2, 155.7)),  # steady, a little slower
        "p2+off": CellState((120.0, 120.1)),
        "p3+off": CellState((50.0, 50.1)),
    }
    nb = next_batch(cands, results, remaining_s=1e9, switch_s=1, repeat_s=1)
    assert {c.label for c in nb.survivors} == {"p0+off", "p1+off"}
    assert nb.dropped["p2+off"].startswith("round 0: mean 120.05")
    assert screen_mean([5.0]) == 5.0 and screen_mean([]) == float("-inf")
