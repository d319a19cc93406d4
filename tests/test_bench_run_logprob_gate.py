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


def test_rounding_noise_passes_and_a_large_jump_fails_naming_it():
    st = g.compare(*long_decode(0.001), 5)
    assert st.tokens == 400
    assert g.verdict(st, T) == (g.PASS, [])
    bad = g.compare(*long_decode(0.4, every=37), 5)
    verdict, reasons = g.verdict(bad, T)
    assert verdict == g.FAIL and "0.400 nats" in reasons[0]


def test_the_p99_rule_catches_many_middling_changes():
    st = g.compare(*long_decode(0.1, every=5), 5)  # 20% of tokens move by 0.1: under max, over p99
    verdict, reasons = g.verdict(st, T)
    assert verdict == g.FAIL and any("p99" in r for r in reasons)


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


def test_the_default_thresholds_sort_the_committed_calibration_with_room():
    """docs/evidence/logprob-gate/calibration.json (tools/gpu/numerics_calibration.py on one H200): with the
    default thresholds every correct reduction order passes and every broken reduction fails, and the
    defaults leave at least 1.4x of room to each side on every statistic."""
    import json
    from pathlib import Path

    cal = json.loads((Path(__file__).resolve().parent.parent / "docs/evidence/logprob-gate/calibration.json").read_text())
    t = T
    for model in cal["models"].values():
        for name, v in model["variants"].items():
            st = g.GateStats(**{k: v[k] for k in g.GateStats.__dataclass_fields__})
            assert g.verdict(st, t)[0] == (g.PASS if v["correct"] else g.FAIL), (name, v)
    for key in ("max_delta", "p99_delta", "max_flip_gap"):
        d = cal["derived"][key]
        assert getattr(t, key) >= 1.4 * d["correct_max"] and d["broken_min"] >= 1.4 * getattr(t, key), key


def test_thresholds_are_named_settings_and_a_bad_one_exits_2_naming_it():
    import pytest

    from launcher import settings

    assert g.thresholds({"KIT_GATE_MAX_DELTA": "0.5"}).max_delta == 0.5
    for name, bad in (("KIT_GATE_MAX_DELTA", "-0.1"), ("KIT_GATE_P99_DELTA", "nan"), ("KIT_GATE_MIN_TOKENS", "0"),
                      ("KIT_GATE_TOP_K", "five"), ("KIT_GATE_MAX_FLIP_GAP", "inf")):
        with pytest.raises(settings.SettingError, match=name) as err:
            g.thresholds({name: bad})
        assert err.value.exit_code == 2
