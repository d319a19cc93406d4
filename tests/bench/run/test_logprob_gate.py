"""bench/run/logprob_gate.py: the common-prefix statistics and the verdict."""

from __future__ import annotations

from bench.run import logprob_gate as g

T = g.thresholds({})


def rows(tokens, lps, tops=None):
    tops = tops or [{t: lp} for t, lp in zip(tokens, lps, strict=True)]
    return [g.TokenLogprob(t, lp, top) for t, lp, top in zip(tokens, lps, tops, strict=True)]


def test_identical_decodes_compare_every_token_with_no_change():
    ref = {str(i): rows([1, 2, 3], [-0.1, -0.2, -0.3]) for i in range(4)}
    st = g.compare(ref, ref, 5)
    assert (st.prompts, st.tokens, st.exact_match_rate, st.max_delta, st.flips) == (4, 12, 1.0, 0.0, 0)


def test_common_prefix_stops_at_the_first_divergence_and_the_flip_is_a_near_tie():
    ref = {"a": rows([5, 6, 7, 8], [-0.5, -0.69, -0.1, -0.1],
                     [{5: -0.5}, {6: -0.69, 9: -0.70}, {7: -0.1}, {8: -0.1}])}
    cand = {"a": rows([5, 9, 1, 1], [-0.52, -0.69, -0.1, -0.1],
                      [{5: -0.52}, {9: -0.69, 6: -0.70}, {1: -0.1}, {1: -0.1}])}
    st = g.compare(ref, cand, 5)
    assert st.tokens == 1 and abs(st.max_delta - 0.02) < 1e-9  # only position 0 shares a context
    assert st.flips == 1 and st.hard_mismatches == 0 and abs(st.max_flip_gap - 0.01) < 1e-9
    assert st.median_first_divergence == 1 and st.exact_match_rate == 0.0


def test_a_flip_to_a_token_outside_the_top_k_is_hard():
    ref = {"a": rows([1, 2], [-0.1, -0.1], [{1: -0.1}, {2: -0.1, 3: -2.0}])}
    cand = {"a": rows([1, 4], [-0.1, -0.1], [{1: -0.1}, {4: -0.1, 2: -0.2}])}
    st = g.compare(ref, cand, 5)
    assert st.hard_mismatches == 1 and st.max_flip_gap is None
    assert g.verdict(st, T)[0] == g.FAIL


def long_decode(shift: float, n_prompts: int = 10, n: int = 40, every: int = 10**9):
    ref, cand = {}, {}
    for p in range(n_prompts):
        lps = [-0.5 - 0.001 * i for i in range(n)]
        ref[str(p)] = rows(list(range(n)), lps)
        cand[str(p)] = rows(list(range(n)), [lp + (shift if i % every == 0 else 0.001) for i, lp in enumerate(lps)])
    return ref, cand


def test_rounding_noise_passes_and_a_large_move_fails_naming_it():
    st = g.compare(*long_decode(0.001), 5)
    assert st.tokens == 400 and abs(st.mean_delta - 0.001) < 1e-9
    assert g.verdict(st, T) == (g.PASS, [])
    bad = g.compare(*long_decode(0.4, n_prompts=20, every=37), 5)  # 2 of 40 tokens moved by 0.4: p99 0.4
    verdict, reasons = g.verdict(bad, T, g.tolerance(T, None))
    assert bad.tokens == 800 and verdict == g.FAIL and any("p99 log-probability change 0.400 nats" in r for r in reasons)


def test_on_few_tokens_the_p99_is_reported_not_judged():
    """Under P99_MIN_TOKENS the 99th percentile is the few largest moves (one routing flip on a MoE): not judged."""
    few = g.compare(*long_decode(0.2, n_prompts=10, every=37), 5)  # 400 tokens, p99 0.2, mean 0.011
    assert few.tokens < g.P99_MIN_TOKENS and few.p99_delta > g.NO_NULL.p99_delta
    assert g.verdict(few, T, g.tolerance(T, None)) == (g.PASS, [])
    many = g.compare(*long_decode(0.2, n_prompts=20, every=37), 5)
    assert g.verdict(many, T, g.tolerance(T, None))[0] == g.FAIL


def test_the_mean_rule_catches_many_small_changes():
    st = g.compare(*long_decode(0.008, every=1), 5)  # every token moved by 0.008: under the p99 limit, over the mean's
    null = g.Null("baseline at 1 against 8", g.compare(*long_decode(0.0, every=1), 5))
    verdict, reasons = g.verdict(st, T, g.tolerance(T, null))
    assert verdict == g.FAIL and reasons[0].startswith("mean log-probability change 0.0080 nats")
    assert "the floor + 1.5x the null: baseline at 1 against 8" in reasons[0]


def test_the_limits_are_the_floor_plus_the_null_and_a_set_setting_replaces_one():
    null = g.Null("ref at 1 against 8", g.compare(*long_decode(0.004, every=1), 5))
    tol = g.tolerance(T, null)
    assert tol.basis == "null" and tol.null is null
    assert abs(tol.limits.mean_delta - (g.FLOOR.mean_delta + 1.5 * 0.004)) < 1e-9
    assert abs(tol.limits.p99_delta - (g.FLOOR.p99_delta + 1.5 * 0.004)) < 1e-9
    assert tol.limits.max_flip_gap == g.FLOOR.max_flip_gap  # a near-tie is a near-tie, whatever the null
    fixed = g.tolerance(g.thresholds({"KIT_GATE_P99_DELTA": "0.5"}), null)
    assert fixed.limits.p99_delta == 0.5 and fixed.basis == "null, KIT_GATE_P99_DELTA set"
    assert g.tolerance(T, None).limits == g.NO_NULL and g.tolerance(T, None).basis == "calibrated (no null)"


def test_a_null_on_too_few_tokens_is_not_used_and_the_verdict_says_so():
    few = g.Null("ref at 1 against 8", g.compare(*long_decode(0.004, n_prompts=2, n=10), 5))
    tol = g.tolerance(T, few)
    assert tol.null is None and tol.limits == g.NO_NULL and "20 tokens compared, 200 needed" in tol.notes[0]


def test_a_reference_that_moves_past_the_calibration_judges_nothing():
    """A null past NO_NULL (a batch-only fault in baseline itself would give one) licenses no candidate: not
    enough evidence, with the note, unless a token left the other's top-k; setting both limits judges again."""
    wild = g.Null("baseline at 1 against 8", g.compare(*long_decode(0.5, every=1), 5))
    tol = g.tolerance(T, wild)
    assert tol.suspect and "moves more against itself" in tol.notes[0]
    st = g.compare(*long_decode(0.6, every=1), 5)
    verdict, reasons = g.verdict(st, T, tol)
    assert verdict == g.NOT_ENOUGH and "check the reference itself" in reasons[0]
    both = g.thresholds({"KIT_GATE_MEAN_DELTA": "1", "KIT_GATE_P99_DELTA": "1"})
    assert g.verdict(st, both, g.tolerance(both, wild))[0] == g.PASS


def test_the_maximum_is_reported_and_judged_only_when_set():
    st = g.compare(*long_decode(0.5, n_prompts=1, n=400, every=400), 5)  # one token of 400 moved by 0.5 (a MoE routing flip)
    assert st.max_delta == 0.5 and g.verdict(st, T, g.tolerance(T, None))[0] == g.PASS
    t = g.thresholds({"KIT_GATE_MAX_DELTA": "0.33"})
    verdict, reasons = g.verdict(st, t, g.tolerance(t, None))
    assert verdict == g.FAIL and "KIT_GATE_MAX_DELTA 0.33" in reasons[0]


def test_too_few_tokens_is_not_enough_evidence_never_a_pass():
    st = g.compare(*long_decode(0.001, n_prompts=2, n=10), 5)
    assert st.tokens == 20 and g.verdict(st, T)[0] == g.NOT_ENOUGH


def test_a_server_without_logprobs_is_not_enough_evidence_and_says_why():
    ref, _ = long_decode(0.001)
    st = g.compare(ref, {k: None for k in ref}, 5)
    verdict, reasons = g.verdict(st, T)
    assert (st.missing, st.tokens, verdict) == (10, 0, g.NOT_ENOUGH)
    assert "did not return them" in reasons[0]


def test_quantile_matches_linear_interpolation():
    assert g.quantile([], 0.5) is None
    assert g.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert g.quantile([0.0, 10.0], 0.99) == 9.9


def _calibration():
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[3] / "docs/evidence/logprob-gate/calibration.json").read_text())


def test_the_constants_rest_on_the_committed_calibration():
    """docs/evidence/logprob-gate/calibration.json (tools/gpu/numerics_calibration.py on one H200, judged by
    tools/gate_calibration.py): its verdicts were reached under the module's constants, every correct variant of
    the dense and MoE models passes at 128 prompts, at most 5% fail on 16-prompt subsets, and each constant sits
    where its derivation says."""
    cal = _calibration()
    mod, d = cal["derived"]["module"], cal["derived"]
    assert mod["null_factor"] == T.null_factor and mod["floor"] == g.FLOOR.__dict__ and mod["no_null"] == g.NO_NULL.__dict__
    assert mod["detection_limit"] == g.DETECTION_LIMIT
    assert d["correct_runs"] >= 4 * 5 * 3 and d["correct_wrong_verdicts"] == 0
    assert d["subsets"]["wrong"]["correct"]["rate"] <= 0.05
    st = d["statistics"]
    lo, hi = st["p99_delta"]["dense_correct_max"], st["p99_delta"]["dense_broken_min"]
    assert lo < g.FLOOR.p99_delta < hi  # between the dense models' correct and broken orders
    assert g.FLOOR.mean_delta > st["mean_delta"]["dense_correct_max"]
    assert g.FLOOR.max_flip_gap >= 1.2 * st["max_flip_gap"]["correct_max"]
    for k in ("mean_delta", "p99_delta"):
        assert T.null_factor >= 1.2 * st[k]["factor_needed_by_correct"], k
        assert getattr(g.NO_NULL, k) >= st[k]["correct_max"], k


def test_the_committed_verdicts_are_what_the_gate_gives_today():
    """Every run of the calibration judged again from its statistics and its null gives the verdict recorded."""
    cal = _calibration()
    for model in cal["models"].values():
        for key, r in model.items():
            null = g.Null("null", g.GateStats.from_dict(r["null"]))
            verdict, _ = g.verdict(g.GateStats.from_dict(r["stats"]), T, g.tolerance(T, null))
            assert verdict == r["verdict"], key
    caught = cal["derived"]["caught"]
    assert all(v["failed"] == v["runs"] for k, v in caught.items() if k.split()[1] == "stale")


def test_thresholds_are_named_settings_and_a_bad_one_exits_2_naming_it():
    import pytest

    from launcher import settings

    assert g.thresholds({"KIT_GATE_MAX_DELTA": "0.5"}).max_delta == 0.5
    assert g.thresholds({"KIT_GATE_NULL_FACTOR": "3"}).null_factor == 3.0
    for name, bad in (("KIT_GATE_MAX_DELTA", "-0.1"), ("KIT_GATE_P99_DELTA", "nan"), ("KIT_GATE_MIN_TOKENS", "0"),
                      ("KIT_GATE_TOP_K", "five"), ("KIT_GATE_MAX_FLIP_GAP", "inf"), ("KIT_GATE_NULL_FACTOR", "0"),
                      ("KIT_GATE_MEAN_DELTA", "x")):
        with pytest.raises(settings.SettingError, match=name) as err:
            g.thresholds({name: bad})
        assert err.value.exit_code == 2
