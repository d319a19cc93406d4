"""The correctness gate on a SIMULATED mixture-of-experts model, end to end through a real `launcher serve` stack
(supervisord, control API, stand-in with `numerics_model: moe`): baseline's decode moves between batch sizes (the
null), a correct reordering moves single tokens far (routing flips) and passes, a broken reduction fails, a fault
that shows only when 8 requests share a forward fails at concurrency 8, and none of the broken ones wins a tune."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testsupport.stack import REPO, KitStack, standin_stack

pytestmark = pytest.mark.stack
STANDIN = {"default": {"startup_delay_s": 0.2, "ttft_ms": 3, "decode_ms": 3, "verify_ms": 4, "accept_length": 2.0,
                       "numerics_model": "moe"}}
PROFILES = {
    "moe-fast": 'STANDIN_NUMERICS = "reorder"\nSTANDIN_DECODE_MS = "1.5"\n',  # correct, twice baseline's speed
    "moe-broken": 'STANDIN_NUMERICS = "corrupt"\nSTANDIN_DECODE_MS = "1"\n',  # faster still, wrong
    # the fastest, and right alone, but wrong when 8 requests share a forward
    "moe-batch8": 'STANDIN_NUMERICS = "reorder"\nSTANDIN_CORRUPT_MIN_BATCH = "8"\nSTANDIN_DECODE_MS = "0.8"\n',
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with standin_stack(tmp_path_factory.mktemp("moe-gate"), STANDIN) as s:
        for name, env in PROFILES.items():
            (s.profiles_dir / f"{name}.toml").write_text(
                f'description = "test: {name}"\nstatus = "experimental"\nextends = "baseline"\n[env]\n{env}')
        yield s


@pytest.fixture(autouse=True)
def from_baseline(stack):
    """Each test starts from baseline + off, whatever the one before left (a failure must not cascade)."""
    st = stack.wait_state({"serving", "rolled_back"})
    if (st["profile"], st["spec"]) != ("baseline", "off"):
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")


def bench(stack: KitStack, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    base = {k: v for k, v in stack.env.items() if not k.startswith("KIT_GATE_")}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def test_bench_run_passes_a_correct_moe_reordering_and_fails_the_broken_ones(stack, tmp_path):
    r = bench(stack, "run", "--url", stack.server_url, "--control", stack.control_url,
              "--profiles", "baseline,moe-fast,moe-broken,moe-batch8", "--spec", "off", "--concurrency", "1,8",
              "--repeats", "1", "--num-prompts", "16", "--max-tokens", "128", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())

    def corr(profile: str) -> dict:
        return json.loads((run_dir / f"{profile}__off.json").read_text())["correctness"]

    fast, broken, batch8 = corr("moe-fast"), corr("moe-broken"), corr("moe-batch8")
    assert fast["status"] == "PASS", fast["reasons"]
    assert fast["tolerance"]["null"]["label"] == "baseline+off at concurrency 1 against 8"
    assert set(fast["levels"]) == {"1", "8"}
    # a routing flip: today's constants (0.33 max, 0.045 p99) would have failed this correct profile
    assert max(lv["stats"]["max_delta"] for lv in fast["levels"].values()) > 0.33
    assert broken["status"] == "FAIL"
    assert batch8["status"] == "FAIL" and batch8["levels"]["1"]["status"] == "PASS"
    assert batch8["levels"]["8"]["status"] == "FAIL" and all(x.startswith("at concurrency 8: ") for x in batch8["reasons"])
    # the bundle keeps the raw /generate exchange of every reply, at both levels
    kept = [json.loads(line) for line in (run_dir / "moe-fast__off.logprobs.jsonl").read_text().splitlines()]
    assert len(kept) == 32 and {k["concurrency"] for k in kept} == {1, 8}
    assert all(k["request"]["path"] == "/generate" and k["response"]["meta_info"]["output_top_logprobs"] for k in kept)

    # judged again offline from those files alone: the same verdicts, exit 1 for the FAILs
    again = bench(stack, "gate", "--bundle", str(run_dir), "--json")
    assert again.returncode == 1, again.stderr[-2000:]
    cells = json.loads(again.stdout)["cells"]
    assert {k: v["status"] for k, v in cells.items()} == {
        "baseline+off": "PASS", "moe-fast+off": "PASS", "moe-broken+off": "FAIL", "moe-batch8+off": "FAIL"}
    # ... and under overridden settings: a minimum no pass reaches leaves nothing PASSed
    strict = bench(stack, "gate", "--bundle", str(run_dir), "--json", env={"KIT_GATE_MIN_TOKENS": "100000"})
    statuses = {k: v["status"] for k, v in json.loads(strict.stdout)["cells"].items()}
    assert statuses["moe-fast+off"] == "not enough evidence" and statuses["moe-broken+off"] == "FAIL"


def test_a_tune_picks_the_correct_moe_profile_and_never_a_broken_one(stack, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env.update(KIT_CONTROL_TOKEN=stack.token, PYTHONPATH=str(REPO), KIT_PROFILES_DIR=str(stack.profiles_dir))
    r = subprocess.run([sys.executable, "-m", "bench", "tune", "--url", stack.server_url, "--control", stack.control_url,
                        "--profiles", "baseline,moe-fast,moe-broken,moe-batch8", "--spec", "off",
                        "--concurrency", "1,8", "--num-prompts", "8", "--max-tokens", "64", "--warmup", "0",
                        "--budget", "15m", "--switch-timeout", "60", "--health-timeout", "30",
                        "--final-blocks", "4", "--final-repeats", "4", "--out", str(tmp_path)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(tmp_path.glob("*/tune.json")).read_text())
    assert res["winner"] and res["winner"]["label"] == "moe-fast+off", (res["decision"], r.stderr[-3000:])
    cells = {c["label"]: c for c in res["cells"]}
    assert cells["moe-broken+off"]["correctness"]["status"] == "FAIL"
    assert cells["moe-batch8+off"]["correctness"]["status"] == "FAIL"
    assert cells["moe-batch8+off"]["correctness"]["levels"]["1"]["status"] == "PASS", cells["moe-batch8+off"]
    st = stack.status()
    assert (st["profile"], st["spec"]) == ("baseline", "off")  # production back on the plan it started with
