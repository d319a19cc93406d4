"""bench allreduce's exact check (bench/allreduce/exact.py): the verdict logic on recorded ranks, the
negative control of the kernel path, and the real CLI on gloo with 2 CPU ranks, PASS and an injected FAIL.

The CUDA parts (graph replays, the profiler's kernel names) need GPUs and are not run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.allreduce import exact
from bench.allreduce.launch import BackendRun
from bench.allreduce.records import RunSettings
from bench.allreduce.results import rows_for

REPO = Path(__file__).resolve().parents[3]
HIDDEN = 7168


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KIT_ALLREDUCE_TEST_")}
    return subprocess.run([sys.executable, "-m", "bench", "allreduce", *args], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}, timeout=300,
                          cwd=REPO)


# ----- the values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "world"), [("bf16", 2), ("bf16", 8), ("bf16", 17), ("bf16", 40), ("fp16", 64),
                                              ("fp32", 8)])
def test_every_sum_stays_exact_in_the_dtype(dtype, world):
    mod = exact.modulus(dtype, world)
    assert 2 <= mod <= 16
    assert (mod - 1) * world <= exact.EXACT_UP_TO[dtype]  # the largest sum, so every partial sum, is exact


def test_values_change_with_every_call_and_rank():
    mod = exact.modulus("bf16", 8)
    calls = range(2 * exact.EXACT_CALLS)  # eager calls, then graph replays
    for i in range(64):
        assert len({exact.value(i, 0, c, mod) for c in calls}) == len(calls)
        assert len({exact.value(i, r, 0, mod) for r in range(8)}) == 8
    sums = [[exact.exact_sum(i, c, 8, mod) for i in range(64)] for c in calls]
    for a, b in zip(sums, sums[1:], strict=False):
        assert sum(x != y for x, y in zip(a, b, strict=True)) > 32  # a stale result fails at most elements


def test_compare_finds_the_first_wrong_element_and_the_corruption_hook_makes_one():
    torch = pytest.importorskip("torch")
    mod = exact.modulus("bf16", 2)
    expected = exact._expected(12, 1, 2, mod, "cpu")
    result = expected.to(torch.bfloat16)
    ok = exact.compare(result.clone(), expected)
    assert ok.wrong == 0 and ok.first is None
    bad = exact.compare(result.clone(), expected, corrupt=True)
    assert bad.wrong == 1 and bad.first is not None
    assert bad.first.to_json() == {"index": 6, "got": "-1", "expected": int(expected[6])}
    assert bad.digest != ok.digest


# ----- the negative control: whose kernel ran -----------------------------------------------------------


def test_path_state_fails_only_on_a_sign_of_another_path():
    nccl_kernel = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    assert exact.path_state(("device", "nccl"), [nccl_kernel])[0] == "taken"
    assert exact.path_state(("device", "fused-ar"), ["allreduce_fusion_kernel_oneshot_lamport<bf16>"])[0] == "taken"
    state, why = exact.path_state(("device", "pcie-ipc"), [nccl_kernel])
    assert state == "not taken" and "NCCL ran in its place" in why  # a silent fall-back to NCCL
    assert exact.path_state(("device", "nccl"), ["void at::native::vectorized_elementwise_kernel"])[0] == "not taken"
    assert exact.path_state(("device", "pcie-ipc"), ["some_kernel"])[0] == "unverified"
    assert exact.path_state(("device", "nccl"), [])[0] == "unknown"  # nothing recorded decides nothing
    assert exact.path_state(("device", "nccl"), None, "profiler failed (X)") == ("unknown", "profiler failed (X)")
    assert exact.path_state(("host", "gloo:all_reduce"), ["c10d::allreduce_", "gloo:all_reduce"])[0] == "taken"
    assert exact.path_state(None, ["x"])[0] == "n/a"


def test_every_backend_names_its_own_path():
    from bench.allreduce.registry import KNOWN_BACKENDS, make_backend

    for name in KNOWN_BACKENDS:
        assert make_backend(name).path is not None, name


# ----- verdicts from recorded ranks ---------------------------------------------------------------------


def _call(mode, n, call, wrong=0, digest="d", first=None):
    out = {"mode": mode, "n": n, "call": call, "wrong": wrong, "digest": digest}
    return {**out, "first": first} if first else out


def _rank(calls, path="taken", evidence="ncclDevKernel_AllReduce"):
    return {"shape": [2, HIDDEN], "modulus": 16, "calls": calls, "wrong": sum(c["wrong"] for c in calls),
            "path": path, "path_evidence": evidence}


def _good(graph=False):
    calls = [_call("eager", n + 1, n) for n in range(exact.EXACT_CALLS)]
    if graph:
        calls += [_call("graph", k + 1, exact.EXACT_CALLS + k) for k in range(exact.EXACT_CALLS)]
    return calls


def _verdict(ranks, sizes=(2 * HIDDEN * 2,), nranks=2, status="ok", reason=""):
    return exact.verdict("nccl", BackendRun(status=status, reason=reason, ranks=ranks), nranks, HIDDEN, list(sizes))


def _result(rank, rows):
    """One rank's result as the worker writes it."""
    return {"rank": rank, "status": "ok", "rows": rows}


def _ranks(*per_rank_exact):
    return [_result(r, [{"size_B": 2 * HIDDEN * 2, "count": 2 * HIDDEN, "exact": e}])
            for r, e in enumerate(per_rank_exact)]


def test_pass_needs_every_call_and_replay_right_on_every_rank():
    v = _verdict(_ranks(_rank(_good(graph=True)), _rank(_good(graph=True))))
    assert v.verdict == "PASS" and v.graph_replays == exact.EXACT_CALLS
    assert v.text.startswith("PASS: every element exact and bit-identical on 2 ranks, 1 size(s) x 3 calls + 3 graph")
    assert "ncclDevKernel_AllReduce at every size" in v.text


def test_fail_names_backend_size_call_rank_element_and_a_stale_buffer():
    mod = 16
    index, call = 7170, 4  # token 1, column 2; the second graph replay
    stale = exact.exact_sum(index, 3, 2, mod)  # what the replay before it summed there
    calls = _good(graph=True)
    calls[call] = _call("graph", 2, call, wrong=5, digest="x",
                        first={"index": index, "got": f"{stale:g}", "expected": exact.exact_sum(index, call, 2, mod)})
    v = _verdict(_ranks(_rank(_good(graph=True)), _rank(calls)))
    assert v.verdict == "FAIL" and v.first_wrong is not None
    assert v.first_wrong.to_json() | {"text": ""} == {
        "backend": "nccl", "size_B": 2 * HIDDEN * 2, "shape": [2, HIDDEN], "mode": "graph", "call": 2, "rank": 1,
        "index": index, "got": f"{stale:g}", "expected": exact.exact_sum(index, call, 2, mod), "text": ""}
    assert v.text.startswith(f"FAIL: nccl at 28672 B (2 x {HIDDEN}), graph replay 2/3, rank 1: element 7170 "
                                f"(token 1, column 2) = {stale}, expected")
    assert "graph replay 1/3's sum there: a stale buffer?" in v.text
    assert "5 wrong element(s), 1 of 6 checks failed" in v.text


def test_ranks_that_disagree_bit_for_bit_fail():
    calls = _good()
    calls[2] = _call("eager", 3, 2, digest="other")
    v = _verdict(_ranks(_rank(_good()), _rank(calls)))
    assert v.verdict == "FAIL" and "eager call 3/3: the ranks got different bits (ranks 0; ranks 1)" in v.text


def test_a_kernel_path_not_taken_fails():
    v = _verdict(_ranks(_rank(_good()), _rank(_good(), "not taken", "NCCL ran in its place: ncclDevKernel")))
    assert v.verdict == "FAIL" and "its own kernel path was not taken (rank 1: NCCL ran in its place" in v.text


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"status": "unavailable", "reason": "no lib"}, "not run: backend skipped: no lib"),
    ({"status": "failed", "reason": "rank 1 hung"}, "not run: the backend failed before its check finished"),
    ({"nranks": 1}, "not run: 1 rank: an all-reduce over one rank adds nothing (NCCL launches no kernel"),
])
def test_what_did_not_run_is_never_a_pass(kwargs, why):
    ranks = [] if kwargs.get("status") else _ranks(_rank(_good()))
    v = _verdict(ranks, **kwargs)
    assert v.verdict == "not run" and v.text.startswith(why)


def test_every_size_declined_is_not_run_and_a_declined_size_is_named():
    declined = [_result(r, [{"size_B": 28672, "count": 1, "skipped": "SGLang would use NCCL"}]) for r in range(2)]
    assert _verdict(declined).text == "not run: the backend declined every size (SGLang would use NCCL)"
    ranks = [_result(r, [{"size_B": 1 << 20, "count": 1, "skipped": "too big"},
                         {"size_B": 28672, "count": 2 * HIDDEN, "exact": _rank(_good())}]) for r in range(2)]
    v = _verdict(ranks, sizes=(1 << 20, 28672))
    assert v.verdict == "PASS" and v.sizes_declined == [1 << 20] and "declined (SGLang sends them" in v.text


def test_every_row_of_a_backend_carries_its_verdict():
    run = RunSettings(nranks=2, sizes=[28672], dtype="bf16", hidden=HIDDEN, iters=1, warmup=0, graph=False,
                      graph_calls=1, graph_launches=1, timeout_s=10.0, profile=None, profile_env={})
    ranks = [_result(r, [{"size_B": 28672, "count": 2 * HIDDEN, "wrong": 0, "exact": _rank(_good()), "mean_us": 1.0,
                          "samples_us": [1.0], "method": "m"}]) for r in range(2)]
    (row,) = [r.to_json() for r in rows_for(run, "gloo", "cpu", BackendRun(status="ok", ranks=ranks), None)]
    assert row["exact"].startswith("PASS") and row["exact_size"]["identical"] and row["status"] == "ok"
    (skipped,) = rows_for(run, "gloo", "cpu", BackendRun(status="unavailable", reason="no lib"), None)
    assert skipped.exact == "not run: backend skipped: no lib"


# ----- the real CLI on gloo -----------------------------------------------------------------------------


@pytest.mark.stack
def test_gloo_cli_passes_every_backend_that_ran_and_says_what_did_not(tmp_path):
    proc = run_cli("--backends", "gloo,nccl", "--nranks", "2", "--iters", "3", "--warmup", "1",
                   "--sizes", f"4K,{HIDDEN * 2},{3 * HIDDEN * 2}", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "allreduce.json").read_text())
    gloo = [r for r in rows if r["backend"] == "gloo"]
    assert len(gloo) == 3 and all(r["status"] == "ok" and r["wrong"] == 0 for r in gloo)
    assert all(r["exact"].startswith("PASS: every element exact and bit-identical on 2 ranks, 3 size(s) x 3 calls")
               for r in gloo)
    assert all(r["exact_size"]["path"] == ["taken: gloo:all_reduce"] * 2 for r in gloo)  # gloo's own call ran
    (nccl,) = [r for r in rows if r["backend"] == "nccl"]
    assert nccl["exact"].startswith("not run: backend skipped: ")  # CPU-only torch: never a PASS
    assert "exactness per backend" in proc.stdout and "PASS" in proc.stdout and "not run" in proc.stdout
    assert "exact" in (tmp_path / "allreduce.csv").read_text().splitlines()[0].split(",")


@pytest.mark.stack
def test_gloo_cli_fails_on_the_injected_wrong_element_naming_it(tmp_path):
    proc = run_cli("--backends", "gloo", "--nranks", "2", "--exact-only", "--out", str(tmp_path),
                   env={"KIT_ALLREDUCE_TEST_CORRUPT_RANK": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "allreduce.json").read_text())
    assert [r["size_B"] for r in rows] == [t * HIDDEN * 2 for t in (1, 2, 3, 4, 8, 16, 32)]  # decode and verify
    assert all(r["status"] == "checked" and "time_us" not in r for r in rows)
    first = rows[0]["exact_first_wrong"]
    assert (first["backend"], first["size_B"], first["mode"], first["call"], first["rank"], first["index"],
            first["got"]) == ("gloo", HIDDEN * 2, "eager", 2, 1, HIDDEN // 2, "-1")
    message = (f"exact check FAIL: gloo at {HIDDEN * 2} B (1 x {HIDDEN}), eager call 2/3, rank 1: element "
               f"{HIDDEN // 2} = -1, expected {first['expected']}")
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert "FAIL" in proc.stdout and not (tmp_path / "allreduce.png").exists()


@pytest.mark.stack
def test_one_rank_is_not_run_and_exits_0(tmp_path):
    proc = run_cli("--backends", "gloo", "--nranks", "1", "--exact-only", "--sizes", "4K", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "allreduce.json").read_text())
    assert row["exact"].startswith("not run: 1 rank")


@pytest.mark.stack
def test_exact_only_refuses_nccl_tests_and_profile_with_plan(tmp_path):
    proc = run_cli("--backends", "gloo", "--exact-only", "--with-nccl-tests", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--exact-only" in proc.stderr
    proc = run_cli("--backends", "gloo", "--profile", "baseline", "--plan", "x.json", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--plan" in proc.stderr
    proc = run_cli("--backends", "gloo", "--plan", str(tmp_path / "missing.json"), "--out", str(tmp_path))
    assert proc.returncode == 2 and "not a rendered plan" in proc.stderr
