"""bench/tune/cli.py: every flag a user can get wrong is exit 2, naming it, before anything is contacted."""

from __future__ import annotations

import pytest

from bench.tune.cli import TuneArgs, check_profile_target, main
from launcher.errors import UserError

BASE = ["--url", "http://127.0.0.1:9", "--control", "http://127.0.0.1:9", "--profiles", "baseline,fused"]


@pytest.fixture(autouse=True)
def _token(monkeypatch):
    monkeypatch.setenv("KIT_CONTROL_TOKEN", "t")
    monkeypatch.delenv("KIT_HOST_FACTS", raising=False)


@pytest.mark.parametrize(("extra", "needle"), [
    (["--budget", "soon"], "--budget 'soon' is not a duration"),
    (["--budget", "0m"], "is zero"),
    (["--eagle3", "3,1,5"], "'3,1,5'"),
    (["--eagle3", "1,1,2", "--spec", "off"], "add eagle3 to --spec"),
    (["--spec", "off,medusa"], "unknown mode 'medusa'"),
    (["--objective", "goodput", "--ttft-ms", "500"], "needs both --ttft-ms and --tpot-ms"),
    (["--tpot-ms", "-1", "--ttft-ms", "5", "--objective", "goodput"], "--tpot-ms -1.0"),
    (["--concurrency", "0"], "at least 1"),
    (["--final-repeats", "0"], "--final-repeats 0"),
    (["--profile-name", "../evil"], "profile"),
    (["--profile-name", "custom-ar"], "--profile-name custom-ar: a built-in profile has that name"),
    (["--profile-name", "base"], "--profile-name base: a built-in profile has that name"),
    (["--final-blocks", "0"], "--final-blocks 0"),
    (["--finalists", "0"], "--finalists 0"),
    (["--facts", "/nonexistent/facts.json"], "--facts /nonexistent/facts.json: no such file"),
    (["--allreduce", "/nonexistent/ar"], "--allreduce"),
    (["--url", "localhost:1"], "--url 'localhost:1'"),
    (["--adaptive", "--concurrency", "1,4"], "give 1 and at least two higher levels"),
    (["--adaptive", "--concurrency", "2,4,8"], "give 1 and at least two higher levels"),
    (["--adaptive", "--concurrency", "1,4,16", "--spec", "eagle3"], "add off to --spec"),
    (["--adaptive", "--concurrency", "1,4,16", "--spec", "off,ngram"], "add eagle3 to --spec"),
    (["--adaptive", "--concurrency", "1,4,16", "--objective", "goodput", "--ttft-ms", "5", "--tpot-ms", "5"],
     "drop --objective goodput"),
])
def test_bad_flags_exit_2_naming_the_flag(extra, needle, capsys):
    assert main([*BASE, *extra]) == 2
    assert needle in capsys.readouterr().err


def test_eligible_needs_host_facts(capsys):
    assert main([a for a in BASE if a not in ("--profiles", "baseline,fused")]) == 2
    assert "--profiles eligible needs the host facts" in capsys.readouterr().err


def test_no_token_is_exit_2(monkeypatch, capsys):
    monkeypatch.delenv("KIT_CONTROL_TOKEN")
    assert main(BASE) == 2
    assert "KIT_CONTROL_TOKEN" in capsys.readouterr().err


def test_a_profile_file_the_tuner_did_not_write_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "tuned.toml").write_text('description = "mine"\nextends = "baseline"\n')
    assert main([*BASE, "--profile-dir", str(tmp_path)]) == 2
    assert "was not written by bench tune" in capsys.readouterr().err
    assert (tmp_path / "tuned.toml").read_text().startswith('description = "mine"')
    (tmp_path / "ours.toml").write_text("# Written by `bench tune` on 2026-01-01\n")
    assert check_profile_target(tmp_path, "ours") == tmp_path / "ours.toml"
    with pytest.raises(UserError):
        check_profile_target(tmp_path, "tuned")


def test_settings_resolve_defaults():
    s = TuneArgs.parse([*BASE, "--spec", "eagle3,off", "--eagle3", "1,1,2;2,1,3", "--budget", "1h30m",
                        "--concurrency", "4,1"]).settings([])
    assert s.budget_s == 5400 and s.specs == ("eagle3", "off") and [p.text() for p in s.points] == ["1,1,2", "2,1,3"]
    assert s.objective.concurrency == 4 and s.concurrency == [4, 1] and s.profiles == ("baseline", "fused")
    assert s.run_settings().repeats == s.screen_repeats and s.run_settings(switching=False).no_switch
    assert "budget_s" not in s.measuring()  # a longer budget reuses the same cells


@pytest.mark.parametrize(("name", "value"), [("KIT_GATE_MAX_DELTA", "-1"), ("KIT_GATE_MIN_TOKENS", "lots"),
                                             ("KIT_GATE_TOP_K", "0")])
def test_a_bad_gate_threshold_is_exit_2_naming_it_before_anything_is_contacted(name, value, monkeypatch, capsys):
    # BASE's server and control API do not answer: reaching them would be exit 1, not 2
    monkeypatch.setenv(name, value)
    assert main(BASE) == 2
    err = capsys.readouterr().err
    assert name in err and "cannot reach" not in err


def test_a_workload_too_small_for_the_gate_is_exit_2_before_anything_is_contacted(monkeypatch, capsys, tmp_path):
    """4 prompts x 48 tokens can compare 192 tokens at most: under the gate's minimum of 200 the whole tune would
    end "not verified"; it is refused first, naming both flags and the minimum (BASE's server never answers: a
    tune that got further would exit 1, and nothing would be switched)."""
    monkeypatch.delenv("KIT_GATE_MIN_TOKENS", raising=False)
    assert main([*BASE, "--num-prompts", "4", "--max-tokens", "48", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--num-prompts 4 x --max-tokens 48 = 192 tokens" in err and "at least 200" in err and "cannot reach" not in err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("KIT_GATE_MIN_TOKENS", "150")  # a lower minimum the same workload reaches: it gets further
    assert main([*BASE, "--num-prompts", "4", "--max-tokens", "48", "--out", str(tmp_path)]) == 1


def test_min_exact_match_is_gone():
    with pytest.raises(SystemExit) as exc:
        TuneArgs.parse([*BASE, "--min-exact-match", "0.9"])
    assert exc.value.code == 2


def test_adaptive_judges_every_level_and_gates_under_eagle3_adaptive_too():
    s = TuneArgs.parse([*BASE, "--adaptive", "--concurrency", "4,1,16"]).settings([])
    assert s.adaptive and s.objective.levels == (1, 4, 16) and s.objective.concurrency == 4
    assert s.reference_specs() == (*s.specs, "eagle3-adaptive") and list(s.measuring()["objective"]["levels"]) == [1, 4, 16]
    plain = TuneArgs.parse(BASE).settings([])
    assert plain.reference_specs() == plain.specs and "levels" not in plain.measuring()["objective"]
