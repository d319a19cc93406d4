"""The full matrix through a real `launcher serve` (supervisord + control API) over the stand-in, and the demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testsupport.stack import REPO, KitStack, standin_stack

pytestmark = pytest.mark.stack  # every test here starts a process

STANDIN_CONFIG = {
    "default": {"ttft_ms": 5, "decode_ms": 3, "verify_ms": 4, "accept_length": 2.0},
    "profiles": {
        "fused": {"corrupt_output": True},  # wrong all-reduce: other text, every draft rejected
        "nccl-tuned": {"fault": "die_mid_stream", "die_on_request": 3, "die_after_chunks": 2},
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with standin_stack(tmp_path_factory.mktemp("bench-stack"), STANDIN_CONFIG) as s:
        yield s


# A few prompts of 16 tokens compare about 50 tokens, under the gate's default of 200 (too little evidence
# for a PASS, which test_the_default_refuses_to_pass_on_too_little_evidence shows): tests that need a verdict
# from such a tiny workload lower it.
TINY_WORKLOAD_GATE = {"KIT_GATE_MIN_TOKENS": "32"}


def bench(stack: KitStack, *args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.run.cli", "--url", stack.server_url, "--control", stack.control_url, *args],
        cwd=REPO, env={**stack.env, **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )


def test_unknown_profile_exits_2_before_any_switch(stack, tmp_path):
    before = stack.status()
    r = bench(stack, "--profiles", "baseline,warp-drive", "--spec", "eagle3", "--out", str(tmp_path))
    assert r.returncode == 2
    assert "unknown profile 'warp-drive'" in r.stderr and "Traceback" not in r.stderr
    after = stack.status()
    assert after["history"] == before["history"] and after["digest"] == before["digest"]
    assert list(tmp_path.iterdir()) == []


def test_full_matrix_gate_validity_and_failed_switch(stack, tmp_path):
    found = stack.wait_state({"serving", "rolled_back"})
    r = bench(stack, "--profiles", "baseline,fused,nccl-tuned,crashy", "--spec", "eagle3,off", "--repeats", "2",
              "--num-prompts", "3", "--max-tokens", "16", "--warmup", "1", "--switch-timeout", "30",
              "--health-timeout", "20", "--out", str(tmp_path), env=TINY_WORKLOAD_GATE)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["simulated"] is True
    assert manifest["gate"]["min_tokens"] == 32
    assert set(manifest["plans"]) == {f"{p}__{s}" for p in ("baseline", "fused", "nccl-tuned", "crashy")
                                      for s in ("eagle3", "off")}
    assert all(plan.get("digest") for plan in manifest["plans"].values())

    def cell(profile: str, spec: str) -> dict:
        return json.loads((run_dir / f"{profile}__{spec}.json").read_text())

    for spec in ("eagle3", "off"):
        base = cell("baseline", spec)
        assert base["valid"] is True, base["invalid_reason"]
        assert base["switch"]["outcome"] in ("switched", "unchanged")
        assert base["correctness"]["status"] == "PASS"
        assert base["plan_digest"] == manifest["plans"][f"baseline__{spec}"]["digest"]

        fused = cell("fused", spec)  # valid numbers, but wrong outputs: FAIL whatever its speed
        assert fused["valid"] is True, fused["invalid_reason"]
        assert fused["correctness"]["status"] == "FAIL"
        assert fused["correctness"]["exact_match_rate"] < 0.9
        assert fused["correctness"]["first_divergence"] is not None

        died = cell("nccl-tuned", spec)  # the server died mid-stream: invalid, with the reason
        assert died["valid"] is False
        assert "requests failed" in died["invalid_reason"] or "did not come back" in died["invalid_reason"]
        assert died["output_throughput"] is None

        crashy = cell("crashy", spec)  # the switch rolled back; the matrix went on
        assert crashy["valid"] is False
        assert crashy["switch"]["outcome"] == "rolled_back"
        assert crashy["invalid_reason"].startswith("switch rolled_back")

    assert cell("baseline", "eagle3")["accept_length"] == 2.0
    assert cell("fused", "eagle3")["accept_length"] == 1.0
    assert any("accept length 1.00" in x for x in cell("fused", "eagle3")["correctness"]["reasons"])
    died = cell("nccl-tuned", "eagle3")
    assert any("restarted" in (rep.get("invalid_reason") or "") or "failed" in (rep.get("invalid_reason") or "")
               for rep in died["per_repeat"])

    summary = (run_dir / "summary.md").read_text()
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in summary.splitlines() if line.startswith("| ")}
    assert "| FAIL |" in rows[("fused", "eagle3")] and "| FAIL |" in rows[("fused", "off")]
    assert "| INVALID |" in rows[("nccl-tuned", "eagle3")] and "| INVALID |" in rows[("crashy", "off")]
    assert "1.00x" in rows[("baseline", "off")]
    assert summary.startswith("# SIMULATED")
    csv_lines = (run_dir / "summary.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 8
    # the last switch rolled back to a working plan; then the bench put production back on the plan it found
    status = stack.wait_state({"serving"})
    assert (status["profile"], status["spec"], status["digest"]) == (found["profile"], found["spec"], found["digest"])
    assert f"production back on {found['profile']}+{found['spec']}, the plan it found" in r.stderr


def test_the_gate_judges_log_probabilities_not_texts(stack, tmp_path):
    """8 prompts x 128 tokens: enough evidence under the default thresholds. A reordered all-reduce passes
    though many of its texts differ from baseline's; a broken one fails although it is the fastest; a server
    that sends no log-probabilities is not enough evidence, never a pass."""
    r = bench(stack, "--profiles", "baseline,reordered,corrupt-fast,no-logprobs", "--spec", "off", "--repeats", "1",
              "--num-prompts", "8", "--max-tokens", "128", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["gate"]["min_tokens"] == 200  # the default

    def cell(profile: str) -> dict:
        return json.loads((run_dir / f"{profile}__off.json").read_text())

    base, reordered, corrupt, quiet = (cell(p) for p in ("baseline", "reordered", "corrupt-fast", "no-logprobs"))
    assert all(c["valid"] for c in (base, reordered, corrupt, quiet))
    assert base["correctness"]["status"] == "PASS" and base["correctness"]["exact_match_rate"] == 1.0
    rc = reordered["correctness"]
    assert rc["status"] == "PASS", rc["reasons"]
    assert rc["exact_match_rate"] <= 0.75 and rc["first_divergence"] is not None  # well under 90% of texts match
    assert rc["logprobs"]["tokens"] >= 200 and rc["tolerance"]["null"]["label"] == "baseline+off at concurrency 1 against 8"
    cc = corrupt["correctness"]
    assert corrupt["output_throughput"] > max(base["output_throughput"], reordered["output_throughput"])
    assert cc["status"] == "FAIL" and any("p99 log-probability change" in r for r in cc["reasons"])
    qc = quiet["correctness"]
    assert qc["status"] == "not enough evidence" and qc["logprobs"] is None
    assert any("no log-probabilities" in x and "this profile" in x for x in qc["reasons"])
    rows = {line.split("|")[1].strip(): line for line in (run_dir / "summary.md").read_text().splitlines()
            if line.startswith("| ")}
    assert "| OK |" in rows["reordered"] and "| FAIL |" in rows["corrupt-fast"]
    assert "| UNVERIFIED |" in rows["no-logprobs"] and "| OK |" not in rows["no-logprobs"]


def test_a_workload_too_small_for_the_gate_is_refused_before_anything_is_switched(stack, tmp_path):
    """2 prompts of 16 tokens can compare 32 tokens at most, under the gate's default of 200: exit 2 naming both
    flags and the minimum, no bundle, no switch."""
    before = len(stack.history())
    r = bench(stack, "--profiles", "baseline,reordered", "--spec", "off", "--repeats", "1", "--num-prompts", "2",
              "--max-tokens", "16", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "--num-prompts 2 x --max-tokens 16 = 32 tokens" in r.stderr and "at least 200" in r.stderr
    assert list(tmp_path.iterdir()) == [] and len(stack.history()) == before


def test_a_level_above_eagles_running_cap_is_refused_before_anything_is_switched(stack, tmp_path):
    """EAGLE runs at most 48 requests at once unless the plan says otherwise (speculative_hook.py:1086-1093): at 64
    the row would time 48 running and 16 queued beside `off` running 64. Exit 2 from the plans' flags, no switch."""
    before = len(stack.history())
    r = bench(stack, "--profiles", "baseline", "--spec", "off,eagle3", "--concurrency", "1,64", "--repeats", "1",
              "--num-prompts", "2", "--max-tokens", "16", "--warmup", "0", "--out", str(tmp_path), env=TINY_WORKLOAD_GATE)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "baseline+eagle3: --concurrency 64 is above the server's max_running_requests 48" in r.stderr
    assert "--max-running-requests 64" in r.stderr and "(nothing was switched)" in r.stderr
    assert list(tmp_path.iterdir()) == [] and len(stack.history()) == before


def test_plans_come_from_the_server_and_no_switch_labels_from_its_status(stack, tmp_path):
    r = bench(stack, "--no-switch", "--repeats", "1", "--num-prompts", "2", "--max-tokens", "8", "--warmup", "0",
              "--out", str(tmp_path / "a"))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next((tmp_path / "a").iterdir())
    status = stack.status()
    label = f"{status['profile']}__{status['spec']}"
    assert (run_dir / f"{label}.json").is_file()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    plan = manifest["plans"][label]
    assert plan["digest"] == status["digest"] and plan["argv"] and plan["env"] is not None
    wrong = bench(stack, "--no-switch", "--profiles", "fused", "--out", str(tmp_path / "b"))
    assert wrong.returncode == 2 and f"but the control API's /status says it runs {status['profile']}" in wrong.stderr
    assert not (tmp_path / "b").exists() or list((tmp_path / "b").iterdir()) == []


def test_a_cell_whose_expected_backend_is_not_active_is_invalid(kit_stack, tmp_path):
    """Degraded switch, then --no-switch on that server: both cells INVALID, no tok/s under the name."""
    stack = kit_stack("baseline", "off", extra_env={"KIT_ACTIVATION_FAILURE": "degraded"})
    common = ("--repeats", "1", "--num-prompts", "2", "--max-tokens", "8", "--warmup", "0")
    r = bench(stack, "--profiles", "ipc-quiet", "--spec", "off", *common, "--out", str(tmp_path / "a"),
              env={"KIT_GATE_MIN_TOKENS": "16"})  # 2 prompts x 8 tokens: what is measured here is validity
    assert r.returncode == 0, r.stderr[-3000:]
    cell = json.loads((next((tmp_path / "a").iterdir()) / "ipc-quiet__off.json").read_text())
    assert cell["valid"] is False and cell["switch"]["outcome"] == "degraded"
    assert "pcie-ipc" in cell["invalid_reason"] and cell["per_repeat"] == []
    assert "production back on baseline+off, the plan it found" in r.stderr, r.stderr[-2000:]
    assert stack.wait_state({"serving"})["profile"] == "baseline"
    assert stack.switch("ipc-quiet", "off").json()["outcome"] == "degraded"  # by hand, for --no-switch below
    assert stack.status()["state"] == "degraded"
    r = bench(stack, "--no-switch", *common, "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr[-3000:]
    cell = json.loads((next((tmp_path / "b").iterdir()) / "ipc-quiet__off.json").read_text())
    assert cell["valid"] is False and cell["invalid_reason"].startswith("expected backend not active: pcie-ipc")
    assert cell["backends"][0]["active"] is False and cell["per_repeat"] == []
