"""Pure parts of the bench: statistics, correctness gate, validity rules, bundle aggregation, compare."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from bench.client import RequestRecord, parse_prometheus

from bench import bundle, compare, correctness, report, stats
from bench.matrix import restart_reasons, spec_from_server_info
from bench.workload import build_workload, load_prompts, render_chat_template
from launcher.errors import UserError


# ----- stats -------------------------------------------------------------------------------------
def test_percentile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert stats.percentile(xs, 50) == 3.0
    assert stats.percentile(xs, 90) == pytest.approx(7.6)  # 4 + 0.6 * (10 - 4)
    assert stats.percentile(xs, 99) == pytest.approx(float(np.percentile(xs, 99)))
    assert stats.percentile([], 50) is None
    assert stats.percentile([None, 5.0], 50) == 5.0


def test_distribution_keys_and_values():
    d = stats.distribution([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert d["mean"] == 5.0
    assert d["median"] == 4.5
    assert d["std"] == 2.0  # population sd, as sglang.benchmark.serving
    assert d["p90"] == pytest.approx(7.6)
    assert stats.distribution([]) == dict.fromkeys(stats.DIST_STATS)


def test_mean_sd_is_sample_sd_across_repeats():
    mean, sd = stats.mean_sd([80.0, 82.0, 84.0])
    assert mean == 82.0
    assert sd == 2.0  # sqrt(((−2)² + 0 + 2²) / (3 − 1))
    assert stats.mean_sd([5.0]) == (5.0, 0.0)
    assert stats.mean_sd([None, float("nan")]) == (None, None)
    assert stats.fmt_mean_sd(82.0, 2.0) == "82.0 ± 2.0"
    assert stats.fmt_mean_sd(None, None) == "n/a"


def test_spread_rule():
    assert stats.spread_exceeded(5.0, 1.0, 1.0)  # 5 > 2 * sqrt(2) = 2.83
    assert not stats.spread_exceeded(2.0, 1.0, 1.0)
    assert stats.spread_exceeded(-5.0, 1.0, 1.0)


# ----- request record and per-repeat numbers -----------------------------------------------------
def _rec(pid: str, ttft: float, e2e: float, tokens: int, verify: int | None, gaps: list[float], ok: bool = True):
    return RequestRecord(
        prompt_id=pid, ok=ok, ttft_s=ttft, e2e_s=e2e, completion_tokens=tokens, spec_verify_ct=verify,
        chunk_gaps_s=gaps, chunk_tokens=[2] * (len(gaps) + 1), text=f"text {pid}",
    )


def test_record_derived_metrics():
    r = _rec("a", 0.1, 1.1, 101, 50, [0.02] * 49)
    assert r.tpot_s == pytest.approx(0.01)  # (1.1 - 0.1) / 100
    assert r.output_tps == pytest.approx(101 / 1.1)
    assert r.accept_length == pytest.approx(101 / 50)
    assert _rec("b", 0.1, 1.0, 10, 0, []).accept_length is None
    assert _rec("c", 0.1, 1.0, 10, None, []).accept_length is None
    assert _rec("d", 0.1, 0.1, 1, None, []).tpot_s is None


def test_repeat_summary_uses_bench_serving_keys_and_raw_gaps():
    recs = [_rec("a", 0.1, 1.1, 100, 50, [0.02, 0.04]), _rec("b", 0.3, 1.3, 100, 25, [0.06])]
    s = bundle.repeat_summary(recs, duration=2.0)
    assert s["completed"] == 2 and s["failed"] == 0
    assert s["total_output_tokens"] == 200
    assert s["output_throughput"] == 100.0
    assert s["request_throughput"] == 1.0
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_itl_ms"] == pytest.approx(40.0)  # raw chunk gaps, not divided by tokens
    assert s["p99_itl_ms"] == pytest.approx(float(np.percentile([20, 40, 60], 99)))
    assert s["accept_length"] == pytest.approx(200 / 75)  # token-weighted over the repeat
    for name in ("ttft", "tpot", "itl", "e2e_latency"):
        for stat in stats.DIST_STATS:
            assert f"{stat}_{name}_ms" in s


def test_aggregate_mean_sd_and_invalid_gives_no_numbers():
    reps = [
        {"repeat": 0, "valid": True, "output_throughput": 80.0, "completed": 4, "accept_length_source": "meta_info"},
        {"repeat": 1, "valid": True, "output_throughput": 84.0, "completed": 4, "accept_length_source": "meta_info"},
    ]
    agg = bundle.aggregate(reps, valid=True)
    assert agg["output_throughput"] == 82.0
    assert agg["output_throughput_mean"] == 82.0
    assert agg["output_throughput_sd"] == pytest.approx(math.sqrt(8))
    assert agg["completed"] == 8
    assert agg["repeats_valid"] == 2
    bad = bundle.aggregate(reps, valid=False)
    assert bad["output_throughput"] is None and bad["output_throughput_sd"] is None
    assert bad["completed"] is None


# ----- validity -----------------------------------------------------------------------------------
def test_restart_reasons():
    same = {"start_time": 1.0, "restarts": 0, "pid": 10}
    assert restart_reasons(same, dict(same)) == []
    assert "start_time" in restart_reasons(same, {**same, "start_time": 2.0})[0]
    assert "restart count 0 -> 1" in restart_reasons(same, {**same, "restarts": 1})[0]
    assert "pid 10 -> 11" in restart_reasons(same, {**same, "pid": 11})[0]
    assert "unreachable" in restart_reasons(same, None)[0]


def test_spec_label_from_server_info():
    assert spec_from_server_info({"speculative_algorithm": "EAGLE3"}) == "eagle3"
    assert spec_from_server_info({"speculative_algorithm": None}) == "off"
    assert spec_from_server_info({}) is None


# ----- correctness gate ----------------------------------------------------------------------------
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


# ----- workload -------------------------------------------------------------------------------------
def test_bundled_prompts_are_mixed_and_chat_templated():
    prompts = load_prompts()
    assert len(prompts) >= 64
    assert {p.task for p in prompts} >= {"code", "math", "prose", "extraction"}
    assert len({p.id for p in prompts}) == len(prompts)
    text = prompts[0].text()
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert render_chat_template([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    first4 = {p.task for p in build_workload("chat", 4)}
    assert len(first4) == 4  # a short run still mixes the tasks


def test_random_workload_is_seeded_and_cycling_ids_stay_unique():
    a, b = build_workload("random", 5, seed=7), build_workload("random", 5, seed=7)
    assert [p.text() for p in a] == [p.text() for p in b]
    assert [p.text() for p in a] != [p.text() for p in build_workload("random", 5, seed=8)]
    many = build_workload("chat", 150)
    assert len({p.id for p in many}) == 150
    with pytest.raises(UserError):
        build_workload("sharegpt", 4)


def test_bad_prompts_file_names_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n{"id": "a", "messages": []}\n')
    with pytest.raises(UserError, match=r"p.jsonl:2"):
        load_prompts(f)


def test_parse_prometheus_sums_label_sets():
    text = (
        "# HELP x\n"
        'sglang:spec_verify_calls_total{model_name="m",tp_rank="0"} 10.0\n'
        'sglang:spec_verify_calls_total{model_name="m",tp_rank="1"} 5.0\n'
        "sglang:generation_tokens_total 30\n"
    )
    m = parse_prometheus(text)
    assert m["sglang:spec_verify_calls_total"] == 15.0
    assert m["sglang:generation_tokens_total"] == 30.0


# ----- compare and report on synthetic bundles --------------------------------------------------------
def _cell(profile, spec, tps, sd, digest="d1", valid=True, repeats=3):
    agg = {"output_throughput_mean": tps, "output_throughput_sd": sd, "mean_tpot_ms_mean": 10.0,
           "mean_tpot_ms_sd": 0.1, "mean_ttft_ms_mean": 40.0, "mean_ttft_ms_sd": 1.0, "accept_length_mean": 2.0,
           "accept_length_sd": 0.0, "repeats_valid": repeats}
    return {"profile": profile, "spec": spec, "valid": valid, "plan_digest": digest, "invalid_reason": None if valid else "x",
            "by_concurrency": {"1": agg}, "correctness": {"status": "PASS"}}


def _manifest(gpu="RTX PRO 6000", driver="580.1", sglang="0.5.23"):
    return {"run_id": "r", "complete": True, "simulated": False, "settings": {"concurrency": [1]},
            "host": {"available": True, "gpus": [{"name": gpu}] * 8, "driver": driver},
            "server": {"sglang_version": sglang}}


def test_fingerprint_differences_list_every_mismatch():
    a = compare.fingerprint(_manifest(), [_cell("fused", "eagle3", 80, 1)])
    b = compare.fingerprint(_manifest(gpu="H200", driver="590.0"), [_cell("fused", "eagle3", 80, 1, digest="d2")])
    diffs = compare.differences(a, b)
    assert any(d.startswith("GPU names") for d in diffs)
    assert any(d.startswith("driver") for d in diffs)
    assert any("plan digest of fused__eagle3" in d for d in diffs)
    assert compare.differences(a, a) == []


def test_deltas_mark_beyond_spread():
    rows = compare.deltas([_cell("fused", "eagle3", 80.0, 1.0)], [_cell("fused", "eagle3", 90.0, 1.0)])
    tps = next(r for r in rows if r["metric"] == "tok/s")
    assert tps["delta"] == 10.0 and tps["beyond_spread"] is True
    rows = compare.deltas([_cell("fused", "eagle3", 80.0, 3.0)], [_cell("fused", "eagle3", 82.0, 3.0)])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is False
    rows = compare.deltas([_cell("fused", "eagle3", 80.0, 0.0, repeats=1)], [_cell("fused", "eagle3", 82.0, 0.0)])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is None
    rows = compare.deltas([_cell("fused", "eagle3", 80.0, 1.0)], [_cell("fused", "eagle3", 82.0, 1.0, valid=False)])
    assert next(r for r in rows if r["metric"] == "tok/s")["note"] == "invalid in B"


def test_markdown_marks_invalid_and_fail_and_simulated():
    cells = [_cell("baseline", "off", 80.0, 1.0), _cell("fused", "eagle3", 120.0, 1.0), _cell("ep", "eagle3", 0, 0, valid=False)]
    cells[1]["correctness"] = {"status": "FAIL", "reasons": ["exact match 0% < 90% of baseline+eagle3"]}
    manifest = {**_manifest(), "simulated": True}
    md = report.markdown(manifest, cells)
    assert md.startswith("# SIMULATED Bench summary")
    fused = next(line for line in md.splitlines() if line.startswith("| fused"))
    assert "| FAIL |" in fused and "1.50x" in fused and "FAIL: exact match" in fused
    ep = next(line for line in md.splitlines() if line.startswith("| ep"))
    assert "INVALID" in ep and "0.0" not in ep


# ----- host fingerprint from nvidia-smi ------------------------------------------------------------
FAKE_SMI = r'''#!/bin/sh
case "$*" in
  *query-gpu*) printf '0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 580.65.06, 00000000:01:00.0\n1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 580.65.06, 00000000:02:00.0\n' ;;
  "topo -m") printf '\033[4mGPU0\tGPU1\tCPU Affinity\033[0m\nGPU0\t X \tNODE\t0-31\nGPU1\tNODE\t X \t0-31\n' ;;
  *) printf '| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |\n' ;;
esac
'''


def test_host_fingerprint_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("KIT_NCCL_VERSION", "2.28.9")
    fp = bundle.host_fingerprint()
    assert fp["available"] is True
    assert [g["name"] for g in fp["gpus"]] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 2
    assert fp["gpus"][1]["bus_id"] == "00000000:02:00.0"
    assert fp["driver"] == "580.65.06" and fp["cuda"] == "13.0"
    assert fp["nccl"] == "2.28.9" and fp["nccl_source"] == "KIT_NCCL_VERSION"
    assert "\x1b" not in fp["topology"] and fp["topology"].startswith("GPU0\tGPU1")


def test_host_fingerprint_without_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    fp = bundle.host_fingerprint()
    assert fp["available"] is False and "nvidia-smi not found" in fp["reason"] and fp["gpus"] == []
