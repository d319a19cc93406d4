"""A tune started on a plan it measures WRONG never leaves it running (tests/helpers_tune.py: the stack and its
profiles): without --apply production goes to the fastest correct finalist (or baseline when none passed), with
--apply likewise, and a resume after SIGKILL does the same; tune.json names the outcome and the exit code is 3."""

from __future__ import annotations

import os
import signal
import subprocess

import helpers_tune
import pytest
from helpers_tune import journal, result, run_tune, tune_argv, tune_env

from testsupport.net import until
from testsupport.stack import REPO

pytestmark = pytest.mark.stack  # every test here starts a process

stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline


def start_on_wrong(stack) -> None:
    assert stack.switch("wrong", "off").json()["outcome"] == "switched"
    stack.wait_state({"serving"})


def runs(stack, profile: str) -> None:
    st = stack.wait_state({"serving"})
    assert (st["profile"], st["spec"]) == (profile, "off"), st


def test_without_apply_production_goes_to_the_fastest_correct_plan(stack, tmp_path):
    start_on_wrong(stack)
    r = run_tune(stack, tmp_path, "--profiles", "baseline,fast,wrong")
    assert r.returncode == 3, r.stderr[-3000:]
    d = result(tmp_path)["decision"]
    assert (d["outcome"], d["incumbent"], d["chosen"]) == ("running_plan_wrong", "wrong+off", "fast+off"), d
    assert d["reason"].startswith("wrong output"), d["reason"]
    vs = {c["role"]: c for c in d["comparisons"]}
    assert vs["runner-up"]["other"] == "baseline+off"  # the interval that says it is the fastest
    assert "the running plan wrong+off FAILed the correctness gate: production goes to fast+off although --apply " \
           "was not given" in r.stderr, r.stderr[-2000:]
    runs(stack, "fast")


def test_with_none_correct_but_the_reference_production_goes_to_baseline(stack, tmp_path):
    start_on_wrong(stack)
    r = run_tune(stack, tmp_path, "--profiles", "wrong")
    assert r.returncode == 3, r.stderr[-3000:]
    d = result(tmp_path)["decision"]
    assert (d["outcome"], d["chosen"]) == ("running_plan_wrong", "baseline+off"), d
    runs(stack, "baseline")


def test_a_resume_after_sigkill_with_apply_never_goes_back_to_the_wrong_plan(stack, tmp_path):
    start_on_wrong(stack)
    argv = tune_argv(stack, tmp_path, "--profiles", "baseline,fast,wrong", "--apply")
    proc = subprocess.Popen(argv, cwd=REPO, env=tune_env(stack), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:  # killed once the running plan was found WRONG and something else measured
        until(lambda: (tmp_path / "journal.jsonl").exists() and len(journal(tmp_path)) >= 4, timeout=180,
              what="four finished cells in the journal")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    again = run_tune(stack, tmp_path, "--profiles", "baseline,fast,wrong", "--apply")
    assert again.returncode == 3, again.stderr[-3000:]
    assert "resuming:" in again.stderr
    d = result(tmp_path)["decision"]
    assert (d["outcome"], d["incumbent"], d["chosen"]) == ("running_plan_wrong", "wrong+off", "fast+off"), d
    assert "applied: production runs fast+off" in again.stderr, again.stderr[-2000:]
    runs(stack, "fast")
