"""`bench sla` end to end against the SIMULATED stand-in: the crossing it was given, found within the precision;
speculation losing at high load; an invalid probe making its cell invalid."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bundle import store as bundle
from bench.sla.record import FILE, SlaRecord
from testsupport.net import free_port, wait_healthy
from testsupport.stack import REPO, standin_stack

pytestmark = pytest.mark.stack  # a kit stack (or a bare stand-in) and `bench sla`

def short_dir(factory) -> Path:
    """The stack's folder: supervisord's socket lives in it, and a socket path over 107 bytes cannot be bound (a
    test's own tmp_path, named after the test under an xdist worker's folder, comes close)."""
    return factory.mktemp("sla")


GATE_ENV = {"KIT_GATE_MIN_TOKENS": "32"}  # the gate's evidence floor, lowered for these few short replies


def sla(url: str, control: str | None, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    where = ["--url", url] + (["--control", control] if control else [])
    return subprocess.run([sys.executable, "-m", "bench", "sla", *where, "--burstiness", "1000", "--warmup", "1", *args],
                          cwd=REPO, env={**env, **GATE_ENV}, capture_output=True, text=True, timeout=240)


def only_bundle(out: Path) -> Path:
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def max_wait_ms(rate: float, n: int, cap: int, service_ms: float) -> float:
    """The longest queue wait of `n` requests arriving every 1/rate s at a server that runs `cap` at once, each
    for `service_ms`: the stand-in's slots (engine.py) under regular arrivals."""
    gap = 1000.0 / rate
    free = [0.0] * cap
    worst = 0.0
    for i in range(n):
        slot = min(range(cap), key=free.__getitem__)
        start = max(i * gap, free[slot])
        worst = max(worst, start - i * gap)
        free[slot] = start + service_ms
    return worst


def crossing(target_ms: float, ttft_ms: float, n: int, cap: int, service_ms: float) -> float:
    """The highest rate whose worst TTFT (the stand-in's ttft plus the queue wait) is within `target_ms`."""
    lo, hi = 0.1, 1000.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ttft_ms + max_wait_ms(mid, n, cap, service_ms) <= target_ms else (lo, mid)
    return lo


def test_the_search_finds_the_running_caps_crossing_within_the_precision(tmp_path, tmp_path_factory):
    ttft, decode, cap, tokens, prompts, target, precision = 20.0, 20.0, 3, 6, 30, 60.0, 0.1
    config = {"default": {"ttft_ms": ttft, "decode_ms": decode, "max_running_requests": cap}}
    with standin_stack(short_dir(tmp_path_factory), config) as stack:
        r = sla(stack.server_url, stack.control_url, stack.env, "--profiles", "baseline", "--spec", "off",
                "--ttft-p99-ms", str(target), "--tpot-p99-ms", "1000", "--rate-start", "16", "--rate-min", "1",
                "--rate-max", "200", "--precision", str(precision), "--repeats", "2", "--num-prompts", str(prompts),
                "--max-tokens", str(tokens), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = only_bundle(tmp_path / "out")
    rec = SlaRecord.model_validate(json.loads((run_dir / FILE).read_text()))
    (cell,) = rec.cells
    # one request holds its slot for its TTFT and one decode step per further token (configured: 20 + 5 x 20 ms);
    # regular arrivals. The crossing is computed from the TTFT and slot time the stand-in delivered at the lowest
    # probe, where nothing queued (a loaded machine stretches every sleep of the stand-in; the search must find
    # the crossing of the server it measured, and a wrong search misses it whatever the machine)
    rows = [x for x in bundle.read_requests(run_dir, "baseline", "off")
            if x.ok and x.request_rate == min(p.rate for p in cell.probes)]
    served_ttft = statistics.median(x.ttft_s for x in rows) * 1000
    served = statistics.median(x.e2e_s for x in rows) * 1000
    assert ttft <= served_ttft and ttft + (tokens - 1) * decode <= served
    expected = crossing(target, served_ttft, prompts, cap, served)
    assert cell.status == "found" and cell.correctness == "PASS", cell
    lo, hi = cell.bracket
    assert lo is not None and hi is not None and hi / lo <= 1 + precision
    # within the precision below the crossing; 4% for the stand-in's own timer and HTTP overhead
    assert expected / (1 + precision) / 1.04 <= lo <= expected * 1.04, (lo, hi, expected)
    met = {p.rate: p.met for p in cell.probes}
    assert met[lo] is True and met[hi] is False
    _, (record,) = bundle.load(run_dir)
    assert record.rate_levels == [p.rate for p in cell.probes] and len(record.by_rate) == len(cell.probes)
    assert "max request rate within p99 TTFT ≤ 60 ms" in r.stdout and "baseline+off" in r.stdout


def test_speculation_loses_at_high_load_under_the_batching_model(tmp_path, tmp_path_factory):
    # off: 20 ms a token, +10% per further running request; eagle3: 30 ms a pass of 2.5 tokens, +10% per further
    # request and draft token (simulation.batch_factor): better TPOT alone, worse from about 4 running requests
    config = {"default": {"ttft_ms": 20, "decode_ms": 20, "verify_ms": 30, "accept_length": 2.5, "batch_cost": 0.1}}
    with standin_stack(short_dir(tmp_path_factory), config) as stack:
        r = sla(stack.server_url, stack.control_url, stack.env, "--profiles", "baseline", "--spec", "eagle3,off",
                "--ttft-p99-ms", "1000", "--tpot-p99-ms", "30", "--rate-start", "16", "--repeats", "2",
                "--num-prompts", "30", "--max-tokens", "8", "--json", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)
    rows = {row["cell"]: row for row in data["cells"]}
    e, o = rows["baseline+eagle3"], rows["baseline+off"]
    assert e["status"] == o["status"] == "found" and e["correctness"] == o["correctness"] == "PASS"
    assert e["max_request_rate"] < o["max_request_rate"] and e["speculation_helps"] is False
    assert data["simulated"] is True and Path(data["bundle"]).is_dir()
    rec = SlaRecord.model_validate(json.loads((Path(data["bundle"]) / FILE).read_text()))
    low = [c for c in rec.cells if c.spec == "eagle3"][0].probes[0]
    off_low = [c for c in rec.cells if c.spec == "off"][0].probes[0]
    assert low.rate == off_low.rate and low.per_user_tps and off_low.per_user_tps
    assert low.per_user_tps > off_low.per_user_tps  # alone, or nearly, speculation still pays per user


def test_an_invalid_probe_makes_the_cell_invalid_with_its_reason(tmp_path):
    port = free_port()
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env.update(PYTHONPATH=str(REPO), KIT_CONTROL_PORT=str(free_port()), STANDIN_STARTUP_DELAY_S="0.1",
               STANDIN_TTFT_MS="5", STANDIN_DECODE_MS="5", STANDIN_FAULT="die_mid_stream",
               STANDIN_DIE_ON_REQUEST="6", STANDIN_DIE_AFTER_CHUNKS="2")
    proc = subprocess.Popen([sys.executable, "-m", "testsupport.standin", "--port", str(port), "--enable-metrics"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        r = sla(url, None, env, "--no-switch", "--ttft-p99-ms", "1000", "--tpot-p99-ms", "1000", "--repeats", "2",
                "--num-prompts", "8", "--max-tokens", "8", "--health-timeout", "1", "--out", str(tmp_path))
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 0, r.stderr[-3000:]
    rec = SlaRecord.model_validate(json.loads((only_bundle(tmp_path) / FILE).read_text()))
    (cell,) = rec.cells
    assert cell.status == "invalid" and cell.max_request_rate is None and cell.invalid_reason
    assert "requests failed" in cell.invalid_reason or "did not come back" in cell.invalid_reason
    assert "INVALID" in r.stdout
