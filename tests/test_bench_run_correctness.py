"""bench.run.correctness: first differing character, the PASS/FAIL gate, and the reference outputs."""

from __future__ import annotations

from bench.run import correctness


def test_first_difference_is_a_character_index():
    assert correctness.first_difference("abc", "abc") is None
    assert correctness.first_difference("abcd", "abXd") == 2
    assert correctness.first_difference("ab", "abc") == 2


def test_gate_pass_fail_and_no_baseline():
    base = {"p1": "one two", "p2": "three four"}
    ok = correctness.gate("eagle3", dict(base), 2.0, base, 2.1)
    assert ok["status"] == "PASS" and ok["exact_match_rate"] == 1.0 and ok["first_divergence"] is None
    wrong = correctness.gate("eagle3", {"p1": "one two", "p2": "three FOUR"}, 2.0, base, 2.0)
    assert wrong["status"] == "FAIL" and wrong["exact_match_rate"] == 0.5 and wrong["first_divergence"] == 6
    collapsed = correctness.gate("eagle3", dict(base), 1.0, base, 2.0)
    assert collapsed["status"] == "FAIL"
    assert any("1.05" in r for r in collapsed["reasons"]) and any("60%" in r for r in collapsed["reasons"])
    low = correctness.gate("eagle3", dict(base), 1.1, base, 2.0)  # 1.1 < 0.6 * 2.0
    assert low["status"] == "FAIL"
    assert correctness.gate("off", dict(base), None, None, None)["status"] == "n/a (no baseline)"
    assert correctness.gate("eagle3", dict(base), 1.0, None, None)["status"] == "FAIL"  # absolute rule
    assert correctness.gate("off", {}, None, base, None)["status"] == "n/a (not measured)"


def test_reference_outputs_take_first_level_first_repeat():
    rows = [
        {"ok": True, "prompt_id": "a", "text": "late", "concurrency": 1, "repeat": 1},
        {"ok": True, "prompt_id": "a", "text": "first", "concurrency": 1, "repeat": 0},
        {"ok": True, "prompt_id": "a", "text": "other level", "concurrency": 4, "repeat": 0},
        {"ok": False, "prompt_id": "b", "text": "", "concurrency": 1, "repeat": 0},
    ]
    assert correctness.reference_outputs(rows) == {"a": "first"}
