"""bench/run/repeat.py: a repeat's energy numbers; open-loop levels through `bench run --request-rate` against a
real kit stack, where NVML is not installed (the test venv has no nvidia-ml-py), so the run says so."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from bench.bundle import store as bundle
from bench.client.power import NOT_INSTALLED, EnergyReading
from bench.run.repeat import energy_fields
from testsupport.stack import REPO, standin_stack


def test_energy_fields_from_a_reading_a_reason_or_nothing():
    reading = EnergyReading(method="energy-counter", seconds=2.0, gpu_joules=[300.0, 100.0], total_joules=400.0,
                            average_watts=200.0, samples=2, gpu_count=2)
    assert energy_fields(reading, 800) == {"energy_joules": 400.0, "average_watts": 200.0, "joules_per_token": 0.5,
                                           "energy_method": "energy-counter"}
    assert energy_fields(reading, 0)["joules_per_token"] is None
    assert energy_fields("NVML stopped answering: x", 10) == {"energy_note": "NVML stopped answering: x"}
    assert energy_fields(None, 10) == {}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with standin_stack(tmp_path_factory.mktemp("open-loop"), {"default": {"ttft_ms": 5, "decode_ms": 25}}) as s:
        yield s


@pytest.mark.stack  # a kit stack and `bench run`
def test_two_profiles_see_the_same_arrivals_and_the_client_keeps_the_schedule(stack, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench.run.cli", "--url", stack.server_url, "--control", stack.control_url,
         "--profiles", "baseline,nccl-tuned", "--spec", "off", "--request-rate", "10,20", "--burstiness", "0.5",
         "--concurrency", "12", "--repeats", "2", "--num-prompts", "12", "--max-tokens", "16", "--warmup", "0",
         "--out", str(tmp_path)],
        cwd=REPO, env={**stack.env, "KIT_GATE_MIN_TOKENS": "32"}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest, cells = bundle.load(run_dir)
    written = json.loads((run_dir / "manifest.json").read_text())
    assert written["settings"]["request_rate"] == [10.0, 20.0] and written["settings"]["burstiness"] == 0.5
    schedules: dict[tuple[float, int], list[list[float]]] = defaultdict(list)
    for cell in cells:
        assert cell.valid, cell.invalid_reason
        assert cell.rate_levels == [10.0, 20.0] and set(cell.by_rate) == {"10", "20"}
        assert (cell.rate_level(20.0).model_extra or {})["request_rate"] == 20.0
        assert "request_rate" not in cell.rate_level(20.0).spreads()  # it names the level, it is no measurement
        rows = bundle.read_requests(run_dir, cell.profile, cell.spec)
        by_repeat: dict[tuple[float, int], list] = defaultdict(list)
        for row in rows:
            if row.request_rate is not None:
                assert row.concurrency is None and row.scheduled_s is not None
                by_repeat[(row.request_rate, row.repeat)].append(row)
        assert set(by_repeat) == {(10.0, 0), (10.0, 1), (20.0, 0), (20.0, 1)}
        for key, got in by_repeat.items():
            assert len(got) == 12 and all(x.ok for x in got)
            schedules[key].append(sorted(x.scheduled_s for x in got))
        for rep in cell.per_repeat:
            if rep.request_rate is None:
                continue
            # the client sent at the rate it drew, within 5%; the server reported its load meanwhile
            assert rep.achieved_rate == pytest.approx(rep.request_rate, rel=0.05)
            assert rep.running_max is not None and rep.running_max >= 1 and rep.queued_max is not None
        assert cell.first_level().value("output_throughput")  # the closed-loop level (--concurrency 12) ran too
    assert all(len(v) == 2 and v[0] == v[1] for v in schedules.values())  # each repeat: one schedule for both
    # no NVML here: the manifest says why, the repeats carry no energy number, the summary says so
    assert manifest.energy is not None and not manifest.energy.measured and manifest.energy.reason == NOT_INSTALLED
    assert all(rep.energy_joules is None and rep.joules_per_token is None for c in cells for rep in c.per_repeat)
    summary = (run_dir / "summary.md").read_text()
    assert f"Energy: not measured ({NOT_INSTALLED})" in summary and "J / output token" not in summary
    assert not (run_dir / "energy.csv").exists()
    assert (run_dir / "frontier.png").is_file() and (run_dir / "latency_rate.png").is_file()
    assert "](frontier.png)" in summary and "](latency_rate.png)" in summary
    assert schedules[(10.0, 0)] != schedules[(10.0, 1)]  # and each repeat its own draw
