"""bench.compare: what differs between two runs' fingerprints (setups, not host-local values), and per-cell deltas."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers_bench import cell, manifest

from bench import compare
from bench.bundle_schema import Cell
from testsupport.stack import REPO


def test_fingerprint_differences_list_every_mismatch():
    a = compare.fingerprint(manifest(), [Cell.model_validate(cell("fused", "eagle3", 80, 1))])
    b = compare.fingerprint(manifest(gpu="H200", driver="590.0"), [Cell.model_validate(cell("fused", "eagle3", 80, 1, digest="d2"))])
    diffs = compare.differences(a, b)
    assert any(d.startswith("GPU names") for d in diffs)
    assert any(d.startswith("driver") for d in diffs)
    assert any("plan digest of fused__eagle3" in d for d in diffs)
    assert compare.differences(a, a) == []


def test_deltas_mark_beyond_spread():
    rows = compare.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 1.0))], [Cell.model_validate(cell("fused", "eagle3", 90.0, 1.0))])
    tps = next(r for r in rows if r["metric"] == "tok/s")
    assert tps["delta"] == 10.0 and tps["beyond_spread"] is True
    rows = compare.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 3.0))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 3.0))])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is False
    rows = compare.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 0.0, repeats=1))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 0.0))])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is None
    rows = compare.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 1.0))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 1.0, valid=False))])
    assert next(r for r in rows if r["metric"] == "tok/s")["note"] == "invalid in B"


def test_same_setup_with_other_local_values_is_comparable_and_the_local_values_are_listed():
    a = cell("fused", "eagle3", 80, 1, digest="d1")
    b = cell("fused", "eagle3", 80, 1, digest="d2")  # another model path or port: another plan digest
    a.update(setup_digest="s1", local={"model-path": "/models/k2", "port": "30000"})
    b.update(setup_digest="s1", local={"model-path": "/data/k2", "port": "31000"})
    fa, fb = compare.fingerprint(manifest(), [Cell.model_validate(a)]), compare.fingerprint(manifest(), [Cell.model_validate(b)])
    assert compare.differences(fa, fb) == []
    assert compare.local_differences(fa, fb) == [
        "model-path of fused__eagle3: A=/models/k2 B=/data/k2", "port of fused__eagle3: A=30000 B=31000"]
    b["setup_digest"] = "s2"
    assert compare.differences(fa, compare.fingerprint(manifest(), [Cell.model_validate(b)])) == [
        "setup digest of fused__eagle3: A=s1 B=s2"]


def test_a_bundle_without_setup_digests_falls_back_to_plan_digests():
    old = cell("fused", "eagle3", 80, 1, digest="d1")
    new = {**cell("fused", "eagle3", 80, 1, digest="d2"), "setup_digest": "s1"}
    diffs = compare.differences(compare.fingerprint(manifest(), [Cell.model_validate(old)]), compare.fingerprint(manifest(), [Cell.model_validate(new)]))
    assert diffs == ["plan digest of fused__eagle3: A=d1 B=d2"]


def test_two_real_runs_of_one_setup_on_other_ports_and_model_paths_compare_without_force(kit_stack, tmp_path):
    """As two `make demo` runs (random ports) or two hosts (models stored elsewhere): comparable as they are."""
    bundles = []
    for side in ("a", "b"):
        model = tmp_path / side / "Kimi-K2"
        model.mkdir(parents=True)
        (model / "config.json").write_text('{"hidden_size": 7168}')
        stack = kit_stack("baseline", "off", extra_env={"MODEL_PATH": str(model)}, start=False).start()
        r = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--url", stack.server_url, "--control", stack.control_url,
             "--no-switch", "--repeats", "1", "--num-prompts", "2", "--max-tokens", "8", "--warmup", "0",
             "--out", str(tmp_path / f"out-{side}")],
            cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=120,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        stack.stop()
        run_dir = next((tmp_path / f"out-{side}").iterdir())
        saved = json.loads((run_dir / "baseline__off.json").read_text())
        assert saved["setup_digest"] and saved["local"]["port"] == str(stack.server_port)
        bundles.append((run_dir, saved))
    (a, cell_a), (b, cell_b) = bundles
    assert cell_a["plan_digest"] != cell_b["plan_digest"] and cell_a["setup_digest"] == cell_b["setup_digest"]

    def cmp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bench", "compare", str(a), str(b), *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)

    shown = cmp()
    assert shown.returncode == 0, shown.stderr
    assert "port of baseline__off" in shown.stdout and "model-path of baseline__off" in shown.stdout
    data = json.loads(cmp("--json").stdout)
    assert data["differences"] == [] and len(data["local_differences"]) == 2


def test_gate_statistics_of_two_hosts_are_reported_never_refused():
    a, b = cell("fused", "off", 90.0, 1.0), cell("fused", "off", 91.0, 1.0)
    a["correctness"] = {"status": "PASS", "exact_match_rate": 0.75, "reasons": [],
                        "logprobs": {"tokens": 255, "p99_delta": 0.012, "max_delta": 0.02, "max_flip_gap": 0.004}}
    b["correctness"] = {"status": "FAIL", "exact_match_rate": 0.5, "reasons": ["max delta 1.2 > 0.33"],
                        "logprobs": {"tokens": 180, "p99_delta": 0.9, "max_delta": 1.2, "max_flip_gap": None}}
    rows = compare.gate_rows([Cell.model_validate(a)], [Cell.model_validate(b)])
    assert rows == [{"profile": "fused", "spec": "off", "same_verdict": False,
                     "a": {"status": "PASS", "exact_match_rate": 0.75, "tokens": 255, "p99_delta": 0.012,
                           "max_delta": 0.02, "max_flip_gap": 0.004},
                     "b": {"status": "FAIL", "exact_match_rate": 0.5, "tokens": 180, "p99_delta": 0.9,
                           "max_delta": 1.2, "max_flip_gap": None}}]
    old = Cell.model_validate(cell("fused", "off", 90.0, 1.0))  # an older bundle: a verdict, no statistics
    assert compare.gate_rows([old], [old])[0]["a"]["tokens"] is None
    ma, mb = {**manifest(), "gate": {"max_delta": 0.33, "min_tokens": 200}}, {**manifest(), "gate": {"max_delta": 0.5,
                                                                                                     "min_tokens": 200}}
    assert compare.gate_setting_differences(ma, mb) == ["gate max_delta: A=0.33 B=0.5"]
    assert compare.differences(compare.fingerprint(ma, []), compare.fingerprint(mb, [])) == []  # no refusal
