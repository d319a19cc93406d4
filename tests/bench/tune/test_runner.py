"""`bench tune` end to end, what it decides: the faster correct profile wins; wrong, unverified, failing, collapsed
and equal cells never do; production ends where it started; the bundle, plot and profile file are written
(tests/helpers_tune.py: the stack and its profiles)."""

from __future__ import annotations

import collections
from pathlib import Path

import helpers_tune
import pytest
from helpers_tune import journal, keys, on_start_plan, result, run_tune

pytestmark = pytest.mark.stack  # every test here starts a process

# The shared stack and the autouse reset: pytest looks fixtures up by name in the test module.
stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline


RACE = ("--num-prompts", "8", "--max-tokens", "128")  # the last flags win: more tokens than tune_argv's


@pytest.fixture(scope="module")
def race(stack, tmp_path_factory):
    """One tune over a faster profile (correct, reordered), a faster-but-wrong one, a fast one that sends no
    log-probabilities and one that crashes at start; 8 prompts of 128 tokens, under the gate's defaults."""
    out = tmp_path_factory.mktemp("race")
    before = len(stack.history())
    proc = run_tune(stack, out, "--profiles", "baseline,fast,wrong,mute,crashy", *RACE,
                    env={"KIT_GATE_MIN_TOKENS": "200"}, timeout=600)
    return proc, out, before


def test_the_faster_profile_wins(race):
    proc, out, _ = race
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = result(out)
    assert res["winner"] == {"label": "fast+off", "profile": "fast", "spec": "off", "spec_params": None}
    assert res["decision"]["outcome"] == "winner" and res["decision"]["chosen"] == "fast+off"
    vs = {c["role"]: c for c in res["decision"]["comparisons"]}
    assert vs["running plan"]["other"] == "baseline+off" and vs["running plan"]["ci_low"] > 0
    paired = {p["contender"]: p for p in res["decision"]["paired_by_prompt"]}  # reported beside the rule
    assert paired["fast+off"]["other"] == "baseline+off" and paired["fast+off"]["prompts"] == 8
    assert 1.0 < paired["fast+off"]["ci_low"] <= paired["fast+off"]["median_ratio"]
    cells = {c["label"]: c for c in res["cells"]}
    assert cells["fast+off"]["final_n"] == 4 and cells["baseline+off"]["final_n"] == 4  # helpers_tune.FINAL
    assert cells["fast+off"]["final_mean"] > 1.5 * cells["baseline+off"]["final_mean"]
    corr = cells["fast+off"]["correctness"]  # it won on its log-probabilities, not on equal texts
    assert corr["status"] == "PASS" and corr["exact_match_rate"] <= 0.75


def test_a_faster_but_wrong_profile_never_wins(race):
    proc, out, _ = race
    cells = {c["label"]: c for c in result(out)["cells"]}
    wrong = cells["wrong+off"]
    assert wrong["status"] == "invalid" and "wrong output" in wrong["reason"]
    assert wrong["correctness"]["status"] == "FAIL"
    assert wrong["mean"] > cells["fast+off"]["mean"]  # it was the fastest: the gate, not speed, kept it out
    assert "wrong+off" in result(out)["decision"]["rejected"]
    assert "wrong+off: WRONG" in proc.stderr + proc.stdout


def test_a_profile_without_log_probabilities_is_not_verified_and_never_wins(race):
    proc, out, _ = race
    res = result(out)
    mute = {c["label"]: c for c in res["cells"]}["mute+off"]
    assert mute["status"] == "invalid" and mute["correctness"]["status"] == "not enough evidence"
    assert "not verified" in mute["reason"] and "no log-probabilities" in mute["reason"]
    assert "mute+off" in res["decision"]["rejected"] and res["winner"]["label"] == "fast+off"


def test_the_correctness_pass_runs_once_per_cell_and_is_journalled(race):
    _, out, _ = race
    passes = collections.Counter(e["label"] for e in journal(out) if e["status"] == "ok" and "logprobs" in e["detail"])
    measured = {e["label"] for e in journal(out) if e["status"] == "ok"}
    assert set(passes) == measured and set(passes.values()) == {1}
    base = next(e for e in journal(out) if e["label"] == "baseline+off" and "logprobs" in e["detail"])
    # the reference's pass: 8 prompts at concurrency 1 and at 8 (its null), each reply kept raw as the server sent it
    kept = base["detail"]["logprobs"]
    assert len(kept) == 16 and {r["concurrency"] for r in kept} == {1, 8}
    assert all(r["response"]["meta_info"]["output_token_logprobs"] for r in kept)
    fast = next(e for e in journal(out) if e["label"] == "fast+off" and "logprobs" in e["detail"])
    assert {r["concurrency"] for r in fast["detail"]["logprobs"]} == {1}  # a candidate at the levels measured


def test_a_failing_cell_is_recorded_and_the_tune_goes_on(race):
    proc, out, _ = race
    cells = {c["label"]: c for c in result(out)["cells"]}
    assert cells["crashy+off"]["status"] == "failed" and "switch" in cells["crashy+off"]["reason"]
    failed = [e for e in journal(out) if e["label"] == "crashy+off"]
    assert [e["status"] for e in failed] == ["failed"]  # recorded once, never retried
    assert cells["fast+off"]["final_n"] == 4  # measured after it (helpers_tune.FINAL)


def test_production_is_back_on_the_plan_it_started_with(race, stack):
    proc, out, before = race
    on_start_plan(stack)
    switched = [h for h in stack.history()[before:] if h.get("outcome") == "switched"]
    assert switched and (switched[-1]["to"]["profile"], switched[-1]["to"]["spec"]) == ("baseline", "off")
    assert "production back on baseline+off" in proc.stderr + proc.stdout


def test_the_bundle_plot_and_profile_file_are_written(race, stack):
    _, out, _ = race
    res = result(out)
    run_dir = Path(res["profile_file"]).parent
    for name in ("manifest.json", "summary.md", "tune.png", "tune.json", "fast__off.json"):
        assert (run_dir / name).is_file(), name
    text = Path(res["profile_file"]).read_text()
    assert 'extends = "fast"' in text and "fast+off" in text
    check = stack.cli("check", "tuned", "--spec", "off", env={"KIT_PROFILES_DIR": f"{stack.profiles_dir}:{run_dir}"})
    assert check.returncode == 0, check.stdout + check.stderr
    assert all(c == 1 for c in collections.Counter(keys(journal(out))).values())


def test_a_collapsed_accept_length_fails_the_gate_with_the_same_text(stack, tmp_path):
    proc = run_tune(stack, tmp_path, "--profiles", "baseline,lazy,mha", "--spec", "eagle3", "--eagle3", "3,1,4;2,2,4",
                    "--final-repeats", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = result(tmp_path)
    cells = {c["label"]: c for c in res["cells"]}
    # the server refuses mha at top-k 2 (trtllm_mha): left out with its reason, the rest measured
    excluded = {(x["profile"], x["spec"]): x["reason"] for x in res["excluded"]}
    assert "trtllm_mha" in excluded[("mha", "eagle3(2,2,4)")] and "mha+eagle3(2,2,4)" not in cells
    assert cells["baseline+eagle3(2,2,4)"]["status"] == "measured"
    lazy = cells["lazy+eagle3(3,1,4)"]
    assert lazy["status"] == "invalid" and lazy["correctness"]["exact_match_rate"] == 1.0
    assert "accept length" in lazy["reason"] and lazy["correctness"]["baseline_accept_length"] == 2.0
    assert cells["baseline+eagle3(3,1,4)"]["status"] == "measured"
    on_start_plan(stack)


def test_no_winner_among_equal_profiles(stack, tmp_path):
    proc = run_tune(stack, tmp_path, "--profiles", "baseline,same,same2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = result(tmp_path)
    assert res["winner"] is None and res["profile_file"] is None
    assert res["decision"]["outcome"] not in ("winner", "tie"), res["decision"]
    assert res["decision"]["chosen"] == "baseline+off" and "power" in res["decision"]
    assert not list(tmp_path.glob("*/tuned.toml"))
    on_start_plan(stack)
