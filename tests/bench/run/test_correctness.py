"""bench.run.correctness: first differing character, the log-probability gate's verdicts, and the reference outputs."""

from __future__ import annotations

from bench.bundle.schema import Correctness
from bench.client.request_record import RequestRecord
from bench.run import correctness, logprob_gate
from bench.run.logprob_gate import TokenLogprob
from bench.run.passes import Reply
from launcher.profiles.spec_params import SpecParams


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


def replies(rows_by_level, texts=None):
    """A correctness pass: {level: {prompt: rows}} as replies."""
    texts = texts or {}
    return [Reply(pid, level, texts.get(pid, "text"), rows) for level, by_prompt in rows_by_level.items()
            for pid, rows in by_prompt.items()]


def side(label, rows_by_level, accept=None, point=None, texts=None):
    return correctness.Side(label, texts or {"p1": "one two", "p2": "three four"}, replies(rows_by_level, texts),
                            accept, point)


def ref(accept=None, point=None, null_shift=0.0):
    """baseline at concurrency 1, and at 8 moved by `null_shift` (the null)."""
    return side("baseline+eagle3", {1: lps(), 8: lps(null_shift)}, accept, point)


T = logprob_gate.thresholds({})


def gate(*args, **kw) -> dict:
    """The gate's verdict as a cell's record writes it (its JSON), checked to be that record."""
    verdict = correctness.gate(*args, **kw)
    assert isinstance(verdict, Correctness) and verdict.model_config.get("frozen")
    return verdict.model_dump()
P314 = SpecParams(steps=3, topk=1, draft_tokens=4)
P112 = SpecParams(steps=1, topk=1, draft_tokens=2)


def test_a_reordered_sum_passes_though_texts_differ():
    texts = {"p1": "one two", "p2": "three FOUR"}  # exact match 50%: the old 90% rule would have failed it
    base = correctness.Side("baseline+eagle3", {"p1": "one two", "p2": "three four"}, replies({1: lps(), 8: lps(0.002)}))
    cand = correctness.Side("fused+eagle3", texts, replies({1: lps(0.002, flip_at=40), 8: lps(0.002, flip_at=40)}))
    ok = gate("eagle3", cand, base, thresholds=T)
    assert ok["status"] == "PASS", ok["reasons"]
    assert ok["exact_match_rate"] == 0.5 and ok["first_divergence"] == 6  # still reported, as information
    assert ok["logprobs"]["tokens"] == 200 and ok["logprobs"]["flips"] == 5 and ok["rule"] == "logprob"
    assert set(ok["levels"]) == {"1", "8"} and ok["tolerance"]["basis"] == "null"
    assert "near-ties" in ok["note"]


def test_a_broken_reduction_fails_naming_the_move_and_the_level():
    bad = gate("eagle3", side("fused+eagle3", {1: lps(0.6), 8: lps(0.6)}), ref(), thresholds=T)
    assert bad["status"] == "FAIL" and any("at concurrency 1: " in r and "0.6000 nats" in r for r in bad["reasons"])
    assert any(r.startswith("at concurrency 8: ") for r in bad["reasons"])
    assert bad["exact_match_rate"] == 1.0  # identical texts do not save it


def test_a_fault_only_at_the_highest_level_fails():
    bad = gate("eagle3", side("fused+eagle3", {1: lps(), 8: lps(0.6)}), ref(), thresholds=T)
    assert bad["status"] == "FAIL" and bad["levels"]["1"]["status"] == "PASS"
    assert bad["levels"]["8"]["status"] == "FAIL" and all(r.startswith("at concurrency 8: ") for r in bad["reasons"])


def test_the_limits_scale_with_the_null_the_reference_measures():
    """A move that FAILs against a quiet reference PASSes against one that moves as far against itself at
    another batch size (a mixture-of-experts model), and the verdict names the null it used."""
    shift = 2 * logprob_gate.FLOOR.mean_delta
    cand = side("fused+eagle3", {1: lps(shift)})
    quiet = gate("eagle3", cand, ref(null_shift=0.0), thresholds=T)
    assert quiet["status"] == "FAIL"
    noisy = gate("eagle3", cand, ref(null_shift=0.8 * shift), thresholds=T)
    assert noisy["status"] == "PASS", noisy["reasons"]
    assert noisy["tolerance"]["null"]["label"] == "baseline+eagle3 at concurrency 1 against 8"
    assert abs(noisy["tolerance"]["mean_delta"] - (logprob_gate.FLOOR.mean_delta + T.null_factor * 0.8 * shift)) < 1e-9


def test_no_logprobs_is_not_enough_evidence_never_a_pass():
    r = gate("eagle3", correctness.Side("fused+eagle3", {"p1": "x"}, None, 2.0), ref(2.0), thresholds=T)
    assert r["status"] == "not enough evidence" and "no log-probabilities" in r["reasons"][0]
    none_sent = side("fused+off", {1: {k: None for k in lps()}})
    r = gate("off", none_sent, ref(), thresholds=T)
    assert r["status"] == "not enough evidence"
    assert r["reasons"] == [f"{correctness.NO_LOGPROBS} for this profile's correctness pass"]
    few = gate("off", side("fused+off", {1: lps(n=10)}), side("baseline+off", {1: lps(n=10)}), thresholds=T)
    assert few["status"] == "not enough evidence" and "50 common-prefix tokens" in few["reasons"][0]


BAD_TOPS = "meta_info.output_top_logprobs[0] is 5, not a list"


def with_malformed(replies_, prompt="4", level=1, problem=BAD_TOPS):
    """`replies_` with one prompt's reply at `level` malformed (no rows, the problem named) or left out."""
    return [Reply(r.prompt_id, r.concurrency, r.text, None, problem=problem)
            if (r.prompt_id, r.concurrency) == (prompt, level) else r for r in replies_]


def test_a_malformed_reply_keeps_a_level_from_a_pass_naming_the_prompt_and_the_field():
    """Four good prompts would PASS (240 tokens); the fifth's malformed reply could be the one that fails."""
    cand = side("fused+eagle3", {1: lps(), 8: lps()})
    cand = correctness.Side(cand.label, cand.texts, with_malformed(cand.replies))
    r = gate("eagle3", cand, ref(), thresholds=T)
    assert r["status"] == "not enough evidence" and r["levels"]["8"]["status"] == "PASS"
    assert r["reasons"] == [f"at concurrency 1: 1 prompt(s) of this profile's correctness pass have no usable "
                            f"log-probabilities, so the rest cannot vouch for it: prompt 4: {BAD_TOPS}"]
    base = ref()  # the same on the reference's side, named by its label
    base = correctness.Side(base.label, base.texts, with_malformed(base.replies, level=8))
    r = gate("eagle3", side("fused+eagle3", {1: lps(), 8: lps()}), base, thresholds=T)
    assert r["status"] == "not enough evidence" and "8: 1 prompt(s) of baseline+eagle3's correctness pass" in r["reasons"][0]
    left_out = correctness.Side(cand.label, cand.texts, with_malformed(side("x", {1: lps()}).replies, problem=None))
    r = gate("eagle3", left_out, ref(), thresholds=T)
    assert r["status"] == "not enough evidence" and r["reasons"][0].endswith("prompt 4: the reply has no log-probabilities")


def test_a_fail_elsewhere_stands_beside_a_malformed_reply_and_all_malformed_is_not_enough_evidence():
    broken = side("fused+eagle3", {1: lps(0.6)})
    broken = correctness.Side(broken.label, broken.texts, with_malformed(broken.replies))
    r = gate("eagle3", broken, ref(), thresholds=T)
    assert r["status"] == "FAIL" and any(f"prompt 4: {BAD_TOPS}" in n for n in r["notes"])
    everything = side("fused+eagle3", {1: {k: None for k in lps()}})
    everything = correctness.Side(everything.label, everything.texts,
                                  [Reply(x.prompt_id, 1, "t", None, problem=BAD_TOPS) for x in everything.replies])
    r = gate("eagle3", everything, ref(), thresholds=T)
    assert r["status"] == "not enough evidence"
    assert r["reasons"] == [f"this profile's correctness pass has no usable log-probabilities: prompt 0: {BAD_TOPS}; "
                            f"prompt 1: {BAD_TOPS}; prompt 2: {BAD_TOPS}; and 2 more"]


def test_accept_length_collapse_at_the_same_point_and_no_baseline():
    base = ref(2.0, P314)
    collapsed = gate("eagle3", side("fused+eagle3", {1: lps()}, 1.0, P314), base, thresholds=T)
    assert collapsed["status"] == "FAIL"
    assert any("1.05" in r for r in collapsed["reasons"]) and any("60%" in r for r in collapsed["reasons"])
    assert gate("eagle3", side("f", {1: lps()}, 1.1, P314), base, thresholds=T)["status"] == "FAIL"
    assert gate("off", side("f", {1: lps()}), None, thresholds=T)["status"] == "n/a (no baseline)"
    assert gate("eagle3", side("f", {1: lps()}, 1.0), None, thresholds=T)["status"] == "FAIL"  # absolute
    empty = correctness.Side("f", {}, None)
    assert gate("off", empty, base, thresholds=T)["status"] == "n/a (not measured)"


def test_a_point_is_never_judged_against_another_points_accept_length():
    """(1,1,2) accepts at most 2 tokens a pass: 1.9 against a (3,1,4) reference of 3.4 is below 60% of it, yet
    right. The rule is skipped with a note naming both points; against a (1,1,2) reference it applies."""
    small = side("fused+eagle3(1,1,2)", {1: lps()}, 1.9, P112)
    r = gate("eagle3", small, ref(3.4, P314), thresholds=T)
    assert r["status"] == "PASS", r["reasons"]
    assert "(1,1,2)" in r["accept_note"] and "(3,1,4)" in r["accept_note"]
    same = gate("eagle3", side("fused+eagle3(1,1,2)", {1: lps()}, 1.1, P112), ref(1.9, P112), thresholds=T)
    assert same["status"] == "FAIL" and any("same point (1,1,2)" in r for r in same["reasons"])
    unknown = gate("eagle3", side("f", {1: lps()}, 1.9, None), ref(3.4, P314), thresholds=T)
    assert unknown["status"] == "PASS" and "accept_note" in unknown  # an unknown point is not the same point


def test_a_too_small_workload_is_refused_naming_the_flags():
    import pytest

    from launcher.errors import UserError

    with pytest.raises(UserError, match=r"--num-prompts 4 x --max-tokens 48 = 192 tokens.*at least 200") as err:
        correctness.check_workload(4, 48, T)
    assert err.value.exit_code == 2
    correctness.check_workload(4, 50, T)


def test_reference_outputs_take_first_level_first_repeat():
    rows = [
        {"ok": True, "prompt_id": "a", "text": "late", "concurrency": 1, "repeat": 1},
        {"ok": True, "prompt_id": "a", "text": "first", "concurrency": 1, "repeat": 0},
        {"ok": True, "prompt_id": "a", "text": "other level", "concurrency": 4, "repeat": 0},
        {"ok": False, "prompt_id": "b", "text": "", "concurrency": 1, "repeat": 0},
    ]
    assert correctness.reference_outputs([RequestRecord.model_validate(r) for r in rows]) == {"a": "first"}


def test_under_eagle3_adaptive_the_accept_length_is_reported_not_judged():
    """A 0-step tier reads accept length 1.0 on a correct plan (SGLang counts its 1-token verify), so under
    eagle3-adaptive only the log-probabilities judge: a good pass is a PASS and a broken one still FAILs."""
    base = side("baseline+eagle3-adaptive", {1: lps(), 8: lps()}, 2.4, P314)
    good = gate("eagle3-adaptive", side("f", {1: lps()}, 1.0, P314), base, thresholds=T)
    assert good["status"] == "PASS" and good["accept_length"] == 1.0 and "0-step" in good["accept_note"]
    bad = gate("eagle3-adaptive", side("f", {1: lps(0.6)}, 1.0, P314), base, thresholds=T)
    assert bad["status"] == "FAIL" and any("0.6000 nats" in r for r in bad["reasons"])
    assert not any("accept length" in r for r in bad["reasons"])
    static = gate("eagle3", side("f", {1: lps()}, 1.0, P314), base, thresholds=T)
    assert static["status"] == "FAIL" and "accept_note" not in static  # a static point still is
