"""`bench tune` end to end: real `launcher serve` (supervisord, control API) over the stand-in, real
switches, the tune as its own process, as a user runs it. Profiles change the stand-in's speed through
their [env] (STANDIN_DECODE_MS), their numerics (STANDIN_NUMERICS: a correct reordering or a broken
reduction), their log-probabilities (STANDIN_LOGPROBS) or their output (STANDIN_ACCEPT_LENGTH), so the right
answer is known."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from testsupport.net import until
from testsupport.stack import REPO, FleetStack, KitStack, stop_group

STANDIN = {"default": {"startup_delay_s": 0.2, "ttft_ms": 5, "decode_ms": 3, "verify_ms": 4, "accept_length": 2.0}}
PROFILES = {
    # twice baseline's speed, with a correct all-reduce in another order: its texts part from baseline's
    "fast": '[env]\nSTANDIN_DECODE_MS = "1.5"\nSTANDIN_NUMERICS = "reorder"\n',
    "wrong": '[env]\nSTANDIN_DECODE_MS = "1"\nSTANDIN_NUMERICS = "corrupt"\n',  # faster still, but a broken reduction
    "mute": '[env]\nSTANDIN_DECODE_MS = "1.2"\nSTANDIN_LOGPROBS = "0"\n',  # fast, but sends no log-probabilities
    "same": "",
    "same2": "",
    "lazy": '[env]\nSTANDIN_ACCEPT_LENGTH = "1.02"\n',  # same text, but every draft rejected
    "quick": '[env]\nSTANDIN_VERIFY_MS = "2"\n',  # twice baseline's speed under speculation
    "mha": '[server]\nattention-backend = "trtllm_mha"\n',  # SGLang refuses top-k > 1 with it
}


def _profile(name: str, body: str) -> str:
    return f'description = "test: {name}"\nstatus = "experimental"\nextends = "baseline"\n{body}'


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from testsupport.stack import standin_stack

    with standin_stack(tmp_path_factory.mktemp("tune"), STANDIN) as s:
        for name, body in PROFILES.items():
            (s.profiles_dir / f"{name}.toml").write_text(_profile(name, body))
        yield s


@pytest.fixture(autouse=True)
def from_baseline(stack):
    """Each test starts from baseline + off, whatever the one before left (a failure must not cascade)."""
    until(lambda: stack.status()["state"] not in ("switching", "recovering"), timeout=120, what="no switch running")
    st = stack.status()
    if (st["profile"], st["spec"], st["state"]) != ("baseline", "off", "serving"):
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")


def tune_argv(stack, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench", "tune", "--url", stack.server_url, "--control", stack.control_url,
            "--spec", "off", "--max-tokens", "24", "--num-prompts", "2", "--warmup", "1", "--budget", "10m",
            "--switch-timeout", "60", "--health-timeout", "30", "--out", str(out), *extra]


def tune_env(stack) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    # 2 prompts of 24 tokens compare 48 tokens, under the gate's default of 200 ("not enough evidence", so
    # nothing could win): these tests lower it; the race measures enough tokens for the default (RACE)
    return {**env, "KIT_CONTROL_TOKEN": stack.token, "PYTHONPATH": str(REPO),
            "KIT_PROFILES_DIR": str(stack.profiles_dir), "KIT_GATE_MIN_TOKENS": "32"}


def run_tune(stack, out: Path, *extra: str, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(tune_argv(stack, out, *extra), cwd=REPO, env={**tune_env(stack), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def result(out: Path) -> dict:
    found = sorted(out.glob("*/tune.json"), key=lambda p: p.stat().st_mtime)
    assert found, f"no tune.json under {out}"
    return json.loads(found[-1].read_text())


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines() if line.strip()]


def keys(lines: list[dict]) -> list[tuple[str, str, int]]:
    return [(e["label"], e["phase"], e["round"]) for e in lines]


def on_start_plan(stack) -> None:
    st = stack.wait_state({"serving"})
    assert (st["profile"], st["spec"]) == ("baseline", "off"), st


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
    cells = {c["label"]: c for c in res["cells"]}
    assert cells["fast+off"]["final_n"] == 8 and cells["baseline+off"]["final_n"] == 8
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
    assert len(base["detail"]["logprobs"]) == 8 and all(r["logprobs"] for r in base["detail"]["logprobs"])


def test_a_failing_cell_is_recorded_and_the_tune_goes_on(race):
    proc, out, _ = race
    cells = {c["label"]: c for c in result(out)["cells"]}
    assert cells["crashy+off"]["status"] == "failed" and "switch" in cells["crashy+off"]["reason"]
    failed = [e for e in journal(out) if e["label"] == "crashy+off"]
    assert [e["status"] for e in failed] == ["failed"]  # recorded once, never retried
    assert cells["fast+off"]["final_n"] == 8  # measured after it


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


def test_resume_after_sigkill_measures_nothing_twice(stack, tmp_path):
    argv = tune_argv(stack, tmp_path, "--profiles", "baseline,fast,same")
    proc = subprocess.Popen(argv, cwd=REPO, env=tune_env(stack), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # killed while one of its switches holds the server: the resumed tune must wait for it, not fail
        until(lambda: (tmp_path / "journal.jsonl").exists() and len(journal(tmp_path)) >= 5
              and stack.status()["state"] == "switching", timeout=120,
              what="five finished cells in the journal and a switch running")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    first = journal(tmp_path)
    state = json.loads((tmp_path / "tune-state.json").read_text())
    assert state["start_plan"]["name"] == "baseline"
    again = run_tune(stack, tmp_path, "--profiles", "baseline,fast,same")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(first)} finished cell(s) reused" in again.stderr
    lines = journal(tmp_path)
    assert lines[: len(first)] == first  # kept as written
    counts = collections.Counter(keys(lines))
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert result(tmp_path)["winner"]["label"] == "fast+off"
    on_start_plan(stack)  # where it started, not where the kill left it


def test_a_changed_profile_is_measured_again(stack, tmp_path):
    args = ("--profiles", "baseline,same", "--final-repeats", "1")
    assert run_tune(stack, tmp_path, *args).returncode == 0
    first = journal(tmp_path)
    path = stack.profiles_dir / "same.toml"
    original = path.read_text()
    try:
        path.write_text(original + "# edited\n")
        again = run_tune(stack, tmp_path, *args)
    finally:
        path.write_text(original)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "same+off: measured again (profile same's file changed since it was measured)" in again.stderr
    new = journal(tmp_path)[len(first):]
    assert {e["label"] for e in new} == {"same+off"}  # baseline's cells were reused
    assert {(e["phase"], e["round"]) for e in new} == {(e["phase"], e["round"]) for e in first
                                                        if e["label"] == "same+off"}
    on_start_plan(stack)


def test_sigint_puts_production_back_and_leaves_partial_results(stack, tmp_path):
    proc = subprocess.Popen(tune_argv(stack, tmp_path, "--profiles", "baseline,fast,same"), cwd=REPO,
                            env=tune_env(stack), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: (tmp_path / "journal.jsonl").exists() and len(journal(tmp_path)) >= 3, timeout=120,
              what="three finished cells in the journal")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        stop_group(proc, 5) if proc.poll() is None else None
    assert proc.returncode == 130, err[-3000:]
    assert "production back on baseline+off" in err + out, err[-2500:]
    res = result(tmp_path)
    assert res["complete"] is False and res["interrupted"] is True and res["winner"] is None
    on_start_plan(stack)


def test_apply_switches_to_the_written_profile(stack, tmp_path):
    proc = run_tune(stack, tmp_path, "--profiles", "baseline,fast", "--apply", "--profile-dir",
                    str(stack.profiles_dir), "--profile-name", "tuned-apply")
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        st = stack.wait_state({"serving"})
        assert (st["profile"], st["spec"]) == ("tuned-apply", "off")
        assert "applied: production runs profile tuned-apply" in proc.stderr + proc.stdout
        assert stack.debug_env()["env"].get("KIT_ACTIVE_PROFILE") == "tuned-apply"
    finally:
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")
        (stack.profiles_dir / "tuned-apply.toml").unlink(missing_ok=True)


def test_bad_input_against_the_server_switches_nothing(stack, tmp_path):
    before = len(stack.history())
    bad = run_tune(stack, tmp_path, "--profiles", "baseline,nope")
    assert bad.returncode == 2 and "nope" in bad.stderr
    # a point only the server can judge (it depends on the profile's attention backend)
    point = run_tune(stack, tmp_path / "point", "--profiles", "mha", "--spec", "eagle3", "--eagle3", "2,2,4")
    assert point.returncode == 2, point.stderr[-2000:]
    assert "--eagle3: point '2,2,4' is refused by the server" in point.stderr and "trtllm_mha" in point.stderr
    assert len(stack.history()) == before
    # a budget too small for one cell, known before any switch: the last switch's time is in /status history
    assert stack.switch("fast", "off").json()["outcome"] == "switched"
    assert stack.switch("baseline", "off").json()["outcome"] == "switched"
    before = len(stack.history())
    small = run_tune(stack, tmp_path / "small", "--profiles", "baseline,fast", "--budget", "1s")
    assert small.returncode == 2 and "cannot hold the smallest honest tune" in small.stderr, small.stderr[-2000:]
    assert "--final-repeats" in small.stderr and "give --budget" in small.stderr
    assert len(stack.history()) == before  # nothing switched
    assert not list((tmp_path / "small").glob("journal.jsonl")) or not (tmp_path / "small" / "journal.jsonl").read_text()
    on_start_plan(stack)


def test_fleet_rolls_the_winner_with_its_point(stack, tmp_path):
    hosts = [KitStack(tmp_path / f"host{i}", "baseline", "off", {"KIT_PROFILES_DIR": str(stack.profiles_dir)})
             for i in range(2)]
    (tmp_path / "fleet").mkdir()
    fleet = FleetStack(tmp_path / "fleet", hosts)
    try:
        for h in hosts:
            h.start()
        fleet.start()
        proc = run_tune(stack, tmp_path / "out", "--profiles", "baseline,quick", "--spec", "eagle3", "--eagle3",
                        "1,1,2", "--fleet", str(fleet.file))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert result(tmp_path / "out")["winner"]["label"] == "quick+eagle3(1,1,2)"
        for h in hosts:
            plan = httpx.get(f"{h.control_url}/plan", timeout=5).json()["plan"]
            assert (plan["name"], plan["spec"], plan["spec_params"]) == (
                "quick", "eagle3", {"steps": 1, "topk": 1, "draft_tokens": 2})
        assert "fleet on quick+eagle3(1,1,2): 2 host(s)" in proc.stdout + proc.stderr
        on_start_plan(stack)  # the host it tuned on goes back; the fleet got the winner
    finally:
        fleet.stop()
        for h in hosts:
            h.stop()
