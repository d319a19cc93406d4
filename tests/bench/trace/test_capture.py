"""bench.trace on real traces (CPU here, CUDA from an H200), damaged ones, its JSON output, and capture from a
server (synthetic traces: tests/bench/trace/test_cli.py)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers_trace import FIXTURES, REPO, run_trace

from bench.trace.analyse import analyse_events
from bench.trace.load import load_events
from launcher.errors import UserError
from testsupport.net import free_port, wait_healthy

CAPTURE = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

    def rank_main(rank, world, store, out):
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        x, w = torch.ones(256), torch.randn(256, 256)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                with torch.profiler.record_function("step[VERIFY bs=1]"):
                    y = w @ x
                    dist.all_reduce(y)
                    dist.all_reduce(w @ y)
        if rank == 0:
            prof.export_chrome_trace(out)
        dist.destroy_process_group()
        # torch's own teardown at process exit sometimes aborts ("terminate called without an active
        # exception", SIGABRT) after all the work is done; leave without running it.
        os._exit(0)

    if __name__ == "__main__":
        mp.spawn(rank_main, args=(2, sys.argv[1], sys.argv[2]), nprocs=2)
    """
)


@pytest.mark.stack
def test_real_cpu_trace_from_two_gloo_ranks(tmp_path):
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE)
    out = tmp_path / "trace.json"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = analyse_events(load_events(out)).to_json()
    summary = {k: result[k] for k in ("source", "kernels", "host_allreduce", "steps", "verdict")}
    assert result["source"] == "host" and result["kernels"] == 0, summary
    assert result["host_allreduce"]["count"] == 6, summary
    assert result["steps"]["verify"]["steps"] == 3
    assert result["steps"]["verify"]["allreduces_per_step"] == 2
    assert "2 all-reduces/step" in result["verdict"] and "CPU-only trace" in result["verdict"]


def test_h200_cuda_trace_fixture():
    """Captured on one H200 by tools/gpu/capture_trace.py: 2 blocks x 2 all-reduces, NCCL world size 1."""
    path = FIXTURES / "h200_tp1_nccl_step.json.gz"
    assert path.stat().st_size < 200_000
    result = analyse_events(load_events(path)).to_json()
    assert result["kernels"] > 50  # real CUDA kernels: GEMMs, attention, norms
    assert result["comm_kernels"] == 0  # one NCCL rank launches no communication kernel
    assert result["source"] == "host"
    assert result["steps"]["decode"]["allreduces_per_step"] == 4
    assert result["steps"]["verify"]["allreduces_per_step"] == 4
    assert result["steps"]["verify"]["steps_left_out"] == 1  # the CUDA-graph replay issues no host op
    replay = [r for r in result["step_records"] if r["kind"] == "verify" and r["host_allreduces"] == 0]
    assert len(replay) == 1 and replay[0]["gpu_busy_ms"] > 0  # kernels found through cudaGraphLaunch
    assert "4 all-reduces/step" in result["verdict"] and "one rank" in result["verdict"]


# ----- CLI: bad files and JSON ---------------------------------------------------------------------


@pytest.mark.stack
def test_truncated_and_non_json_traces_exit_2(tmp_path):
    good = gzip.decompress((FIXTURES / "h200_tp1_nccl_step.json.gz").read_bytes())
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(gzip.compress(good)[:3000])
    half = tmp_path / "half.json"
    half.write_bytes(good[: len(good) // 2])
    text = tmp_path / "notes.json"
    text.write_text("this is not a trace")
    for path in (truncated, half, text, tmp_path / "missing.json"):
        proc = run_trace(str(path))
        assert proc.returncode == 2, proc.stderr
        assert str(path) in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(UserError, match="traceEvents"):
        wrong_shape = tmp_path / "obj.json"
        wrong_shape.write_text('{"events": []}')
        load_events(wrong_shape)


@pytest.mark.stack
def test_json_output_keys():
    proc = run_trace(str(FIXTURES / "h200_tp1_nccl_step.json.gz"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in (
        "file",
        "verdict",
        "source",
        "steps",
        "allreduce",
        "host_allreduce",
        "devices",
        "comm_by_family",
    ):
        assert key in data


# ----- capture through /start_profile on the stand-in server ---------------------------------------


@pytest.mark.stack
def test_capture_from_standin_server(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testsupport.standin",
            "--model-path",
            "/models/x",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tp-size",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        out = tmp_path / "traces"
        proc = run_trace(
            "--url",
            f"http://127.0.0.1:{port}",
            "--steps",
            "3",
            "--out",
            str(out),
            "--timeout-s",
            "20",
            "--json",
        )
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert Path(data["file"]).parent == out and "TP-0" in Path(data["file"]).name
        assert data["comm_kernels"] > 0 and data["allreduce"]["count"] > 0
        assert data["verdict"].startswith("communication ")
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.stack
def test_capture_from_a_dead_server_exits_1(tmp_path):
    proc = run_trace("--url", f"http://127.0.0.1:{free_port()}", "--steps", "2", "--out", str(tmp_path))
    assert proc.returncode == 1 and "cannot reach the server" in proc.stderr
