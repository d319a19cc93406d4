"""`bench tune --adaptive` end to end on the stand-in (SIMULATED): when the concurrency levels prefer different
EAGLE-3 steps, the tune writes SGLang's adaptive config from each level's fastest EAGLE-3 point, measures it as an
eagle3-adaptive plan beside the best static one and the running plan, the rule picks it, and the written profile
carries its tiers.

The scenario (the stand-in's settings, the command, why the adaptive plan should win): testsupport/tune_adaptive.py,
which tools/tune_adaptive.py runs for the figures in docs/tune.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers_tune import journal, on_start_plan, result, tune_env

from testsupport import tune_adaptive as scenario
from testsupport.stack import REPO

pytestmark = pytest.mark.stack  # every test here starts a process


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from testsupport.stack import standin_stack

    with standin_stack(tmp_path_factory.mktemp("tune-adaptive"), scenario.STANDIN) as s:
        yield s


@pytest.fixture(scope="module")
def tuned(stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("adaptive")
    argv = [sys.executable, "-m", "bench", *scenario.tune_args(stack.server_url, stack.control_url, out)]
    proc = subprocess.run(argv, cwd=REPO, env={**tune_env(stack), **scenario.ENV}, capture_output=True, text=True,
                          timeout=600)
    return proc, out


def said(proc: subprocess.CompletedProcess) -> str:
    """What the tune printed, for a failing assertion's message."""
    return (proc.stdout + proc.stderr)[-5000:]


def test_the_adaptive_plan_from_the_levels_winners_beats_every_static_point(tuned):
    proc, out = tuned
    assert proc.returncode == 0, said(proc)
    res = result(out)
    ad = res["adaptive"]
    assert ad["label"] is not None, said(proc)
    winners = {w["concurrency"]: w for w in ad["per_level_winners"]}
    assert sorted(winners) == [1, 2, 4]
    assert winners[1]["label"] == "baseline+eagle3(3,1,4)"  # more steps pay at 1
    assert winners[2]["label"] == winners[4]["label"] == "baseline+eagle3(1,1,2)"  # fewer above it
    assert all(w["label"] != "baseline+off" and w["steps"] > 0 for w in winners.values())  # off never fills a tier
    assert ad["tiers"] == {"1": [3], "2": [1], "4": [1]}  # no capture list: SGLang routes the batch itself
    assert ad["routing"] == {"capture": None, "running": 48}
    assert ad["config"] == {k: {"candidate_steps": v} for k, v in ad["tiers"].items()}  # SGLang's file
    label = ad["label"]
    assert label == "baseline+eagle3-adaptive[1:3,2:1,4:1]"
    d = res["decision"]
    assert d["outcome"] == "winner" and d["chosen"] == label, said(proc)
    start = winners[1]["steps"]  # the server starts from the lowest tier's step
    assert res["winner"] == {"label": label, "profile": "baseline", "spec": "eagle3-adaptive",
                             "spec_params": {"steps": start, "topk": 1, "draft_tokens": start + 1},
                             "adaptive_tiers": ad["tiers"]}
    # the same rule against production and against the best static finalist
    vs = {(c["role"], c["other"]): c for c in d["comparisons"] if c["contender"] == label}
    assert vs[("running plan", "baseline+off")]["ci_low"] > 0
    static = [k for k in d["means"] if k not in (label, "baseline+off")]
    assert static and all(d["means"][label] > d["means"][k] for k in static)
    assert res["objective"]["levels"] == [1, 2, 4] and "geometric mean" in res["objective"]["describe"]


def test_the_adaptive_cell_ran_the_written_config_and_was_gated(tuned):
    proc, out = tuned
    res = result(out)
    label = res["adaptive"]["label"]
    lines = [e for e in journal(out) if e["label"] == label]
    assert lines and all(e["phase"] == "final" and e["spec"] == "eagle3-adaptive" for e in lines), said(proc)
    plan = lines[0]["detail"]["plan"]
    assert plan["adaptive_tiers"] == res["adaptive"]["tiers"]
    config = plan["flags"][plan["flags"].index("--speculative-adaptive-config") + 1]
    assert Path(config).is_file() and config.endswith(".json")
    cells = {c["label"]: c for c in res["cells"]}
    run_dir = Path(res["profile_file"]).parent  # its bundle cell is apart from the reference's
    assert (run_dir / "baseline__eagle3-adaptive.json").is_file()
    assert (run_dir / f"baseline__eagle3-adaptive__{res['winner']['spec_params']['steps']}-1-"
                      f"{res['winner']['spec_params']['steps'] + 1}.json").is_file()
    assert cells[label]["status"] == "measured" and cells[label]["correctness"]["status"] == "PASS", said(proc)
    assert cells[label]["correctness"]["baseline"] == "baseline+eagle3-adaptive"  # gated under its own mode
    assert cells["baseline+eagle3-adaptive"]["role"] == "reference"


def test_the_summary_and_profile_carry_the_tiers_and_production_is_back(tuned, stack):
    proc, out = tuned
    said = " ".join((proc.stdout + proc.stderr).split())  # rich wraps long lines
    assert "adaptive: concurrency 1: baseline+eagle3(" in said and "adaptive: tiers written 1:" in said
    assert "won: the written profile carries it" in said and "production back on baseline+off" in said
    res = result(out)
    text = Path(res["profile_file"]).read_text()
    assert "[adaptive_tiers]" in text and "2 = [1]" in text and "--spec eagle3-adaptive" in text
    check = stack.cli("check", "tuned", "--spec", "eagle3-adaptive",
                      env={"KIT_PROFILES_DIR": str(Path(res["profile_file"]).parent)})
    assert check.returncode == 0, check.stdout + check.stderr
    on_start_plan(stack)
