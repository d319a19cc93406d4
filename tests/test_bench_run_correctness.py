"""bench.run.correctness: first differing character, the log-probability gate's verdicts, and the reference outputs."""

from __future__ import annotations

from bench.run import correctness, logprob_gate
from bench.run.logprob_gate import TokenLogprob


def test_first_difference_is_a_character_index():
    assert correctness.first_difference("abc", "abc") is None
    assert correctness.first_difference("abcd", "abXd") == 2
    assert correctness.first_difference("ab", "abc") == 2


def lps(shift: float = 0.0, flip_at: int | None = None, n: int = 60, prompts: int = 5):
    """Correctness-pass rows: `n` tokens per prompt, moved by `shift` nats, the texts parting at `flip_at`."""
    out = {}
    for p in range(prompts):
        rows = []
        for i in range(n):
            tok = 1000 + i if flip_at is None or i < flip_at else 2000 + i
            rows.append(TokenLogprob(tok, -0.3 + shift, {tok: -0.3 + shift, 1000 + i: -0.3, 2000 + i: -0.302}))
        out[str(p)] = rows
    return out


T = logprob_gate.thresholds({})


def test_a_reordered_sum_passes_though_texts_differ():
    base = {"p1": "one two", "p2": "three four"}
    texts = {"p1": "one two", "p2": "three FOUR"}  # exact match 50%: the old 90% rule would have failed it
    ok = correctness.gate("eagle3", texts, 2.0, base, 2.1, logprobs=lps(0.004, flip_at=40), baseline_logprobs=lps(),
                          thresholds=T)
    assert ok["status"] == "PASS", ok["reasons"]
    assert ok["exact_match_rate"] == 0.5 and ok["first_divergence"] == 6  # still reported, as information
    assert ok["logprobs"]["tokens"] == 200 and ok["logprobs"]["flips"] == 5 and ok["rule"] == "logprob"
    assert "near-ties" in ok["note"]


def test_a_broken_reduction_fails_naming_the_move():
    base = {"p1": "one two"}
    bad = correctness.gate("eagle3", dict(base), 2.0, base, 2.0, logprobs=lps(0.6), baseline_logprobs=lps(),
                           thresholds=T)
    assert bad["status"] == "FAIL" and any("0.600 nats" in r for r in bad["reasons"])
    assert bad["exact_match_rate"] == 1.0  # identical texts do not save it


def test_no_logprobs_is_not_enough_evidence_never_a_pass():
    base = {"p1": "one two"}
    r = correctness.gate("eagle3", dict(base), 2.0, base, 2.0, logprobs=None, baseline_logprobs=lps(), thresholds=T)
    assert r["status"] == "not enough evidence" and "no log-probabilities" in r["reasons"][0]
    none_sent = {k: None for k in lps()}
    r = correctness.gate("off", dict(base), None, base, None, logprobs=none_sent, baseline_logprobs=lps(), thresholds=T)
    assert r["status"] == "not enough evidence" and r["reasons"] == [f"{correctness.NO_LOGPROBS} for this profile's correctness pass"]
    few = correctness.gate("off", dict(base), None, base, None, logprobs=lps(n=10), baseline_logprobs=lps(n=10),
                           thresholds=T)
    assert few["status"] == "not enough evidence" and "50 common-prefix tokens" in few["reasons"][0]


def test_accept_length_collapse_and_no_baseline():
    base = {"p1": "one two", "p2": "three four"}
    good = {"logprobs": lps(), "baseline_logprobs": lps(), "thresholds": T}
    collapsed = correctness.gate("eagle3", dict(base), 1.0, base, 2.0, **good)
    assert collapsed["status"] == "FAIL"
    assert any("1.05" in r for r in collapsed["reasons"]) and any("60%" in r for r in collapsed["reasons"])
    assert correctness.gate("eagle3", dict(base), 1.1, base, 2.0, **good)["status"] == "FAIL"  # 1.1 < 0.6 * 2.0
    assert correctness.gate("off", dict(base), None, None, None, logprobs=lps(), thresholds=T)["status"] == "n/a (no baseline)"
    assert correctness.gate("eagle3", dict(base), 1.0, None, None, thresholds=T)["status"] == "FAIL"  # absolute rule
    assert correctness.gate("off", {}, None, base, None, thresholds=T)["status"] == "n/a (not measured)"


def test_reference_outputs_take_first_level_first_repeat():
    rows = [
        {"ok": True, "prompt_id": "a", "text": "late", "concurrency": 1, "repeat": 1},
        {"ok": True, "prompt_id": "a", "text": "first", "concurrency": 1, "repeat": 0},
        {"ok": True, "prompt_id": "a", "text": "other level", "concurrency": 4, "repeat": 0},
        {"ok": False, "prompt_id": "b", "text": "", "concurrency": 1, "repeat": 0},
    ]
    assert correctness.reference_outputs(rows) == {"a": "first"}


def test_under_eagle3_adaptive_the_accept_length_is_reported_not_judged():
    """A 0-step tier reads accept length 1.0 on a correct plan (SGLang counts its 1-token verify), so under
    eagle3-adaptive only the log-probabilities judge: a good pass is a PASS and a broken one still FAILs."""
    base = {"p1": "one two", "p2": "three four"}
    good = correctness.gate("eagle3-adaptive", dict(base), 1.0, base, 2.4, logprobs=lps(), baseline_logprobs=lps(),
                            thresholds=T)
    assert good["status"] == "PASS" and good["accept_length"] == 1.0 and "0-step" in good["accept_note"]
    bad = correctness.gate("eagle3-adaptive", dict(base), 1.0, base, 2.4, logprobs=lps(0.6), baseline_logprobs=lps(),
                           thresholds=T)
    assert bad["status"] == "FAIL" and any("0.600 nats" in r for r in bad["reasons"])
    assert not any("accept length" in r for r in bad["reasons"])
    static = correctness.gate("eagle3", dict(base), 1.0, base, 2.4, logprobs=lps(), baseline_logprobs=lps(), thresholds=T)
    assert static["status"] == "FAIL" and "accept_note" not in static  # a static point still is
