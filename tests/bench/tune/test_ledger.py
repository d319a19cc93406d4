"""bench/tune/ledger.py: what the journal says of a cell — failed, wrong against its reference, or passing."""

from __future__ import annotations

from bench.run import logprob_gate
from bench.tune import journal
from bench.tune.ledger import LOGPROBS, Ledger, reference_label
from launcher.profiles.spec_params import SpecParams


def _logprobs(text, shift):
    """One row per word: token i, its log-probability (-0.1 moved by `shift`) and itself as the top choice."""
    return [[i, -0.1 - shift, [[i, -0.1 - shift], [i + 1000, -3.0]]] for i, _ in enumerate(text.split())]


def _entry(label, *, phase="screen", status="ok", reason="", texts=None, accept=None, shift=0.0):
    profile, spec = label.split("+")
    rows = [{"prompt_id": pid, "text": t, "ok": True, "output_text": t} for pid, t in (texts or {}).items()]
    per_repeat = [{"repeat": 0, "concurrency": 1, "accept_length": accept}] if accept is not None else []
    passed = [{"prompt_id": pid, "text": t, "logprobs": _logprobs(t, shift)} for pid, t in (texts or {}).items()]
    detail = {"rows": rows, "cell": {"profile": "p", "spec": "off", "per_repeat": per_repeat}, LOGPROBS: passed} if status == "ok" else {}
    return journal.Entry(label=label, profile=profile, status=status, plan_digest="d", profile_hash="h",
                         settings_digest="s", phase=phase, reason=reason, spec=spec, detail=detail)


def _ledger(*entries):
    led = Ledger(logprob_gate.thresholds({"KIT_GATE_MIN_TOKENS": "1"}))  # five words are evidence here
    led.entries.extend(entries)
    return led


def test_reference_label_is_baseline_under_the_spec():
    assert reference_label("eagle3") == "baseline+eagle3"


def test_a_failed_cell_is_rejected_with_its_reason():
    led = _ledger(_entry("fused+off", status="failed", reason="rolled back"))
    assert led.failure("fused+off") == "rolled back"
    assert led.gate("fused+off") is None  # no outputs: no verdict


def test_same_texts_as_the_reference_pass():
    texts = {"p0": "the same words", "p1": "and more"}
    led = _ledger(_entry("baseline+off", phase="reference", texts=texts), _entry("fused+off", texts=texts))
    assert led.gate("fused+off").status == "PASS"
    assert led.failure("fused+off") is None and not led.wrong("fused+off")


def test_same_texts_with_far_log_probabilities_are_wrong():
    texts = {"p0": "the same words", "p1": "and more"}
    led = _ledger(_entry("baseline+off", phase="reference", texts=texts), _entry("fused+off", texts=texts, shift=2.0))
    assert led.wrong("fused+off")
    assert led.failure("fused+off").startswith("wrong output: ")


def test_a_cell_without_its_reference_is_not_verified_and_never_wrong():
    led = _ledger(_entry("fused+off", texts={"p0": "text"}))
    why = led.failure("fused+off")
    assert why is not None and why.startswith("not verified") and "baseline+off has no outputs" in why
    assert not led.wrong("fused+off")


def test_entries_of_filters_by_phase_and_spec_of_reads_the_entry():
    led = _ledger(_entry("fused+eagle3", texts={"p0": "a"}), _entry("fused+eagle3", phase="final", texts={"p0": "a"}))
    assert len(led.entries_of("fused+eagle3")) == 2
    assert len(led.entries_of("fused+eagle3", ("final",))) == 1
    assert led.spec_of("fused+eagle3") == "eagle3" and led.spec_of("x+ngram") == "ngram"


def _point_entry(label, point, accept, *, phase="screen", plan_point=None):
    texts = {f"p{i}": " ".join(["w"] * 40) for i in range(5)}
    e = _entry(label.split("(")[0], phase=phase, texts=texts, accept=accept)
    if plan_point is not None:
        assert e.detail.cell is not None
        cell = e.detail.cell.model_copy(update={"plan_spec_params": plan_point})
        e = e.model_copy(update={"detail": e.detail.model_copy(update={"cell": cell})})
    return e.model_copy(update={"label": label, "spec_params": point})


def test_each_eagle3_point_is_judged_against_its_own_points_accept_length():
    """(1,1,2) accepts at most 2 tokens a pass: 1.9 against the reference's 3.4 at (3,1,4) (the overlay's point,
    as its running plan reported it) is not WRONG; the rule is skipped with a note naming both points."""
    p314 = SpecParams(steps=3, topk=1, draft_tokens=4)
    p112 = SpecParams(steps=1, topk=1, draft_tokens=2)
    ref = _point_entry("baseline+eagle3", None, 3.4, phase="reference", plan_point=p314)
    small = _point_entry("fused+eagle3(1,1,2)", p112, 1.9)
    led = _ledger(ref, small)
    verdict = led.gate("fused+eagle3(1,1,2)")
    assert verdict.status == "PASS", verdict.reasons
    assert not led.wrong("fused+eagle3(1,1,2)") and "(3,1,4)" in verdict.model_extra["accept_note"]
    collapsed = _point_entry("fused+eagle3(3,1,4)", p314, 1.9)  # the same point: 1.9 < 60% of 3.4
    led = _ledger(ref, collapsed)
    assert led.wrong("fused+eagle3(3,1,4)") and "60%" in led.failure("fused+eagle3(3,1,4)")
