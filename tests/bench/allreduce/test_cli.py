"""bench.allreduce: sizes, floor, result rows, outputs, input checks, and the real multi-process harness on gloo."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.allreduce import cli as ar_cli
from bench.allreduce.floor import NVLINK4, PCIE_GEN5, floor_us, link_for
from bench.allreduce.launch import BackendRun
from bench.allreduce.output import write_all
from bench.allreduce.records import RunSettings
from bench.allreduce.results import bus_factor, rows_for
from bench.allreduce.sizes import default_sizes, parse_size, parse_sizes
from launcher.errors import UserError

REPO = Path(__file__).resolve().parents[3]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "bench.allreduce.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
    )


# ----- sizes ----------------------------------------------------------------------------------


def test_sizes_accept_units_and_plain_bytes():
    assert parse_size("4K") == 4096
    assert parse_size("1M") == 1 << 20
    assert parse_size("64KiB") == 65536
    assert parse_sizes("1M,4K,43008,4096", "bf16") == [4096, 43008, 1 << 20]


@pytest.mark.parametrize("bad", ["4Q", "-1", "", "0", "1.5K"])
def test_bad_sizes_are_user_errors(bad):
    with pytest.raises(UserError):
        parse_sizes(bad, "bf16")


def test_size_must_be_whole_elements():
    with pytest.raises(UserError, match="whole number of fp32"):
        parse_sizes("43010", "fp32")


def test_default_sizes_hold_verify_shapes_and_sweep():
    sizes = default_sizes(7168, "bf16")
    for tokens in (1, 2, 3, 4, 8, 16, 32):
        assert tokens * 7168 * 2 in sizes
    for p in range(12, 21):  # 4 KiB .. 1 MiB
        assert 1 << p in sizes
    assert sizes == sorted(set(sizes))


# ----- floor and statistics -------------------------------------------------------------------


def test_floor_matches_the_pcie_gen5_anchor():
    # Research anchor: 43,008 B over 8 ranks moves 1.75*S per link = 1.2 us at 63 GB/s, plus ~0.5 us.
    bandwidth_part = floor_us(43008, 8, PCIE_GEN5) - PCIE_GEN5.flag_rtt_us
    assert bandwidth_part == pytest.approx(1.2, abs=0.02)
    assert floor_us(43008, 8, NVLINK4) < floor_us(43008, 8, PCIE_GEN5)
    assert floor_us(43008, 1, PCIE_GEN5) == PCIE_GEN5.flag_rtt_us  # one rank moves nothing
    assert link_for("nvlink") is NVLINK4 and link_for("pcie-switch") is PCIE_GEN5 and link_for(None) is None


def _run(nranks=2, sizes=(4096, 43008)):
    return RunSettings(nranks=nranks, sizes=list(sizes), dtype="bf16", hidden=7168, iters=4, warmup=0, graph=False,
                       graph_calls=1, graph_launches=1, timeout_s=10.0, profile=None, profile_env={})


def _ranks(*rows_per_rank):
    """Each rank's result as the worker writes it, from its rows."""
    return [{"rank": r, "status": "ok", "rows": rows} for r, rows in enumerate(rows_per_rank)]


def test_rows_average_the_pipelined_time_over_ranks_take_the_slowest_per_call_sample_and_sum_wrong():
    ranks = _ranks(
        [
            {"size_B": 4096, "count": 2048, "wrong": 0, "mean_us": 9.0, "samples_us": [10, 10, 10, 10], "method": "m"},
            {"size_B": 43008, "count": 21504, "wrong": 1, "mean_us": 4.0, "samples_us": [5, 5, 5, 5], "method": "m"},
        ],
        [
            {"size_B": 4096, "count": 2048, "wrong": 0, "mean_us": 11.0, "samples_us": [20, 20, 20, 20],
             "method": "m"},
            {"size_B": 43008, "count": 21504, "wrong": 2, "mean_us": 6.0, "samples_us": [7, 7, 7, 7], "method": "m"},
        ],
    )
    rows = [r.to_json() for r in rows_for(_run(), "gloo", "cpu", BackendRun(status="ok", ranks=ranks), PCIE_GEN5)]
    assert [r["time_us"] for r in rows] == [10.0, 5.0]  # nccl-tests -a 1: the mean over ranks
    assert [r["time_us_per_rank"] for r in rows] == [[9.0, 11.0], [4.0, 6.0]]
    assert [r["time_us_p50"] for r in rows] == [20.0, 7.0]
    assert rows[1]["wrong"] == 3
    assert rows[1]["tokens"] == 3 and rows[0]["tokens"] is None
    algbw = 43008 / 5e-6 / 1e9  # from time_us, as nccl-tests computes it
    assert rows[1]["algbw_GBps"] == pytest.approx(algbw, rel=1e-3)
    assert rows[1]["busbw_GBps"] == pytest.approx(algbw * bus_factor(2), rel=1e-3)
    assert rows[1]["floor_us"] == pytest.approx(floor_us(43008, 2, PCIE_GEN5), abs=1e-3)


def test_declined_size_and_unavailable_backend_become_skipped_rows():
    rows_of_a_rank = [
        {"size_B": 4096, "count": 2048, "skipped": "declined"},
        {"size_B": 43008, "count": 21504, "wrong": 0, "mean_us": 1.0, "samples_us": [1.0], "method": "m"},
    ]
    ranks = _ranks(rows_of_a_rank, rows_of_a_rank)
    rows = [r.to_json() for r in rows_for(_run(), "gloo", "cpu", BackendRun(status="ok", ranks=ranks), None)]
    assert rows[0]["status"] == "skipped" and rows[0]["reason"] == "declined"
    assert rows[1]["status"] == "ok"
    skipped = [r.to_json() for r in rows_for(_run(), "gloo", "cpu", BackendRun(status="unavailable", reason="no lib"),
                                             None)]
    assert skipped == [
        {
            **{k: skipped[0][k] for k in ("backend", "profile", "nranks", "graph", "type")},
            "status": "skipped",
            "reason": "no lib",
            "exact": "not run: backend skipped: no lib",  # the exactness verdict: never a PASS
        }
    ]
    failed = rows_for(_run(), "gloo", "cpu", BackendRun(status="failed", reason="rank 1 hung"), None)
    assert failed[0].status == "failed"


def test_outputs_are_written_for_mixed_rows(tmp_path):
    ranks = _ranks(
        [
            {"size_B": 4096, "count": 2048, "wrong": 0, "mean_us": 3.5, "samples_us": [3.0, 4.0], "method": "m"},
            {"size_B": 43008, "count": 21504, "wrong": 0, "mean_us": 5.5, "samples_us": [5.0, 6.0], "method": "m"},
        ]
    )
    rows = rows_for(_run(nranks=1), "gloo", "cpu", BackendRun(status="ok", ranks=ranks), PCIE_GEN5)
    rows += rows_for(_run(), "mscclpp", "cpu", BackendRun(status="unavailable", reason="missing"), None)
    json_path, csv_path, png_path = write_all(tmp_path, rows, PCIE_GEN5)
    assert json.loads(json_path.read_text()) == json.loads(json.dumps([r.to_json() for r in rows], sort_keys=True))
    table = list(csv.DictReader(csv_path.open()))
    assert [r["status"] for r in table] == ["ok", "ok", "skipped"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_says_its_line_is_time_us_not_p50():
    """At 4 KiB on CPU the time_us line sat at 1928 µs while p50 was 520: the axis must name the line."""
    import matplotlib.pyplot as plt

    from bench.allreduce.output import latency_figure

    ranks = _ranks([{"size_B": 4096, "count": 2048, "wrong": 0, "mean_us": 1928.0,
                     "samples_us": [500.0, 520.0, 540.0, 900.0], "method": "m"}])
    rows = rows_for(_run(nranks=1, sizes=[4096]), "gloo", "cpu", BackendRun(status="ok", ranks=ranks), None)
    fig = latency_figure(rows, None)
    ax = fig.axes[0]
    [line] = ax.get_lines()
    assert list(line.get_ydata()) == [rows[0].time_us] and rows[0].time_us != rows[0].time_us_p50
    label = ax.get_ylabel()
    assert "line time_us" in label and "p50 line" not in label and "p50..p99" in label
    plt.close(fig)


# ----- input checks (exit 2, before any process starts) -----------------------------------------


class _FakeCuda:
    name, device_type = "fake", "cuda"

    def __init__(self, reason=None):
        self.reason = reason

    def probe(self):
        return self.reason


def test_more_ranks_than_devices_is_a_user_error():
    with pytest.raises(UserError, match="needs one CUDA device per rank, but 1 are visible"):
        ar_cli.plan_backends([_FakeCuda()], nranks=2, cuda_devices=1)
    planned = ar_cli.plan_backends([_FakeCuda("no lib")], nranks=2, cuda_devices=0)
    assert planned[0][1] == "no lib"  # an unavailable backend is skipped, not an error


@pytest.mark.stack
def test_unknown_backend_exits_2_listing_known(tmp_path):
    proc = run_cli("--backends", "gloo,nvshmem", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "'nvshmem'" in proc.stderr and "gloo" in proc.stderr and "symm-mem" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.stack
def test_bad_numbers_exit_2(tmp_path):
    proc = run_cli("--backends", "gloo", "--iters", "0", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--iters" in proc.stderr


# ----- the real harness on gloo ------------------------------------------------------------------


def _expected_profile_env(name: str) -> dict[str, str]:
    from launcher.profiles.plan import build_plan, check_environ

    return dict(build_plan(name, spec="off", environ=check_environ()).env)


@pytest.mark.stack
def test_gloo_two_ranks_with_profile_env_and_skipped_backends(tmp_path):
    proc = run_cli(
        "--backends",
        "gloo,nccl,mscclpp",
        "--nranks",
        "2",
        "--sizes",
        "4K,43008",
        "--iters",
        "8",
        "--warmup",
        "1",
        "--profile",
        "nccl-tuned",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "allreduce.json").read_text())
    measured = [r for r in rows if r["backend"] == "gloo"]
    assert [r["size_B"] for r in measured] == [4096, 43008]
    for r in measured:
        assert r["status"] == "ok" and r["wrong"] == 0 and r["nranks"] == 2
        assert r["time_us_p50"] > 0 and r["time_us_p99"] >= r["time_us_p50"]
        assert r["time_us"] > 0 and len(r["time_us_per_rank"]) == 2
        assert r["method"].startswith("time: wall clock over 8 pipelined calls / 8")
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * bus_factor(2), rel=1e-2)
        assert r["profile"] == "nccl-tuned"
        # the worker reports what it found in its own environment after applying the profile
        assert r["env"] == _expected_profile_env("nccl-tuned")
    skipped = {r["backend"]: r for r in rows if r["status"] == "skipped"}
    assert set(skipped) == {"nccl", "mscclpp"}  # CPU-only torch, no mscclpp package
    assert all(s["reason"] for s in skipped.values())
    table = list(csv.DictReader((tmp_path / "allreduce.csv").open()))
    assert len(table) == len(rows)
    assert (tmp_path / "allreduce.png").read_bytes()[:4] == b"\x89PNG"
    assert "size_B" in proc.stdout and "busbw_GBps" in proc.stdout


@pytest.mark.stack
def test_gloo_four_ranks_sums_are_exact(tmp_path):
    proc = run_cli(
        "--backends",
        "gloo",
        "--nranks",
        "4",
        "--sizes",
        "43008",
        "--dtype",
        "bf16",
        "--iters",
        "5",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "allreduce.json").read_text())
    assert row["nranks"] == 4 and row["wrong"] == 0 and row["count"] == 21504 and row["samples"] == 5
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 1.5, rel=1e-2)


@pytest.mark.stack
def test_a_hung_rank_is_named_and_stopped(tmp_path):
    proc = run_cli(
        "--backends",
        "gloo",
        "--nranks",
        "2",
        "--sizes",
        "4K",
        "--iters",
        "3",
        "--timeout-s",
        "4",
        "--out",
        str(tmp_path),
        env={"KIT_ALLREDUCE_TEST_HANG_RANK": "1"},
    )
    assert proc.returncode == 1
    assert "rank 1 hung" in proc.stderr and "rank 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    (row,) = json.loads((tmp_path / "allreduce.json").read_text())
    assert row["status"] == "failed" and "rank 1 hung" in row["reason"]
