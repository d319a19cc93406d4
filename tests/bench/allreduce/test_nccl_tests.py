"""bench/allreduce/nccl_tests.py: nccl-tests' all_reduce_perf run beside the kit, and its output parsed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bench.allreduce import nccl_tests
from bench.allreduce.records import ResultRow, RunSettings
from launcher.errors import UserError

REPO = Path(__file__).resolve().parents[3]
RUN = RunSettings(nranks=2, dtype="bf16", graph=False, iters=200, warmup=20, graph_calls=20, graph_launches=10,
                  sizes=[43008], profile="nccl-tuned", timeout_s=30, hidden=7168, profile_env={})
# all_reduce_perf 2.19's stdout for one size (format of src/util.cu and src/common.cu).
SAMPLE = """\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 43008 maxBytes 43008 step: 1048576(bytes) warmup iters: 20 iters: 200 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on    host device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid   4242 on    host device  1 [0000:2a:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
       43008         21504  bfloat16     sum      -1    13.41    3.21    3.21       0    13.02    3.30    3.30       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 3.25535
#
# Collective test concluded: all_reduce_perf
"""


def test_parse_reads_both_halves_and_the_versions():
    parsed = nccl_tests.parse(SAMPLE)
    assert parsed.nccl_tests_version == "2.19.6" and parsed.nccl_library == "22809"
    (row,) = parsed.rows
    assert (row.size_B, row.count, row.type) == (43008, 21504, "bfloat16")
    assert row.out_of_place.model_dump() == {"time_us": 13.41, "algbw_GBps": 3.21, "busbw_GBps": 3.21, "wrong": 0}
    assert row.in_place.time_us == 13.02 and row.in_place.wrong == 0


def test_parse_real_output_from_two_h200s():
    """all_reduce_perf 2.19.6 -g 2 -G 10 on the development machine (docs/evidence/allreduce-calibration-h200x2)."""
    parsed = nccl_tests.parse((REPO / "tests/fixtures/nccl_tests/h200x2_graph_43008.txt").read_text())
    (row,) = parsed.rows
    assert row.size_B == 43008 and row.in_place.model_dump() == {"time_us": 8.2, "algbw_GBps": 5.25,
                                                                 "busbw_GBps": 5.25, "wrong": 0}
    assert parsed.nccl_library == "22809"


def test_parse_without_validation_and_of_garbage():
    no_check = SAMPLE.replace("3.21       0", "3.21     N/A").replace("3.30       0", "3.30     N/A")
    assert nccl_tests.parse(no_check).rows[0].in_place.wrong is None
    assert nccl_tests.parse("segfault\n# nothing\n 12 apples\n").rows == []


def test_command_uses_the_kit_call_counts_per_mode():
    eager = nccl_tests.command(Path("/x/all_reduce_perf"), 43008, RUN)
    assert eager == ["/x/all_reduce_perf", "-b", "43008", "-e", "43008", "-g", "2", "-d", "bfloat16", "-o", "sum",
                     "-c", "1", "-a", "1", "-w", "20", "-n", "200"]
    graph = nccl_tests.command(Path("/x/all_reduce_perf"), 4096, RUN.model_copy(update={"graph": True, "dtype": "fp16"}))
    assert graph[-4:] == ["-n", "20", "-G", "10"] and "half" in graph


def _fake_binary(tmp_path: Path, body: str) -> Path:
    """A stand-in all_reduce_perf (a test double): prints canned output, records its argv and env."""
    path = tmp_path / "all_reduce_perf"
    path.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv\necho \"$NCCL_PROTO\" > {tmp_path}/proto\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.stack
def test_run_sizes_keeps_the_log_and_passes_the_environment(tmp_path):
    binary = _fake_binary(tmp_path, f"cat <<'EOF'\n{SAMPLE}EOF")
    rows = nccl_tests.run_sizes(binary, RUN, {**os.environ, "NCCL_PROTO": "LL"}, tmp_path / "logs", 30)
    (row,) = rows
    assert row.status == "ok" and row.row is not None and row.row.in_place.time_us == 13.02
    assert (tmp_path / "proto").read_text().strip() == "LL"
    assert "-n 200" in (tmp_path / "argv").read_text()
    assert Path(row.log).read_text().startswith("# nccl-tests version 2.19.6")
    (as_row,) = nccl_tests.as_rows(rows, RUN)
    assert as_row.backend == "nccl-tests" and as_row.time_us == 13.02 and as_row.wrong == 0
    assert as_row.samples == 200 and as_row.method.startswith("nccl-tests 2.19.6 all_reduce_perf, in-place")
    kit = [ResultRow(backend="nccl", profile=None, nranks=2, graph=False, type="bf16", status="ok", size_B=43008,
                     time_us=15.624)]
    (compared,) = nccl_tests.compare(kit, [as_row])
    assert compared.nccl_tests_time_us == 13.02 and compared.kit_over_nccl_tests == 1.2


@pytest.mark.stack
def test_a_failing_binary_becomes_a_failed_row_with_its_last_line(tmp_path):
    binary = _fake_binary(tmp_path, "echo 'NCCL failure common.cu:1 unhandled cuda error' >&2; exit 3")
    (row,) = nccl_tests.run_sizes(binary, RUN, dict(os.environ), tmp_path / "logs", 30)
    assert row.status == "failed" and "exit 3" in row.reason and "unhandled cuda error" in row.reason
    (as_row,) = nccl_tests.as_rows([row], RUN)
    assert as_row.status == "failed" and as_row.backend == "nccl-tests"


def test_find_binary_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KIT_NCCL_TESTS_BIN", raising=False)
    with pytest.raises(UserError, match="all_reduce_perf is not on PATH.*docker/build-nccl-tests.sh"):
        nccl_tests.find_binary(None)
    with pytest.raises(UserError, match="is not an executable file"):
        nccl_tests.find_binary(str(tmp_path / "nope"))
    binary = _fake_binary(tmp_path, "true")
    monkeypatch.setenv("KIT_NCCL_TESTS_BIN", str(binary))
    assert nccl_tests.find_binary(None) == binary
    monkeypatch.delenv("KIT_NCCL_TESTS_BIN")
    assert nccl_tests.find_binary(None) == binary  # on PATH


@pytest.mark.stack
def test_cli_without_cuda_refuses_with_nccl_tests_before_any_rank(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.allreduce.cli", "--backends", "gloo", "--nranks", "2", "--with-nccl-tests",
         "--out", str(tmp_path / "out")],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "nccl-tests needs one CUDA device per rank" in proc.stderr
    assert not (tmp_path / "out").exists()
