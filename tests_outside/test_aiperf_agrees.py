"""`bench run --request-rate` against an outside client and a known schedule: one SIMULATED stand-in with fixed
timings (TTFT_MS to the first token, then a token every DECODE_MS, no batching cost, so requests never slow each
other down) is measured open loop by the kit, then by AIPerf 0.13.0 (offline, testsupport/aiperf_client.py) with the
same rate, count, arrival shape and output length. The rate, TTFT p50 and p99, and TPOT of the two clients agree
within 5%, and each client agrees with the stand-in's schedule within 5%.

The two clients run one after the other, never together, and each sends a few uncounted warm-up requests first, so
neither measures the other's load or a cold connection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.bundle import store as bundle
from bench.bundle.cell_numbers import RepeatSummary
from testsupport import aiperf_client
from testsupport.aiperf_client import AIPerfRun, OpenLoad
from testsupport.net import free_port, wait_healthy
from testsupport.stack import REPO, stop_group

pytestmark = pytest.mark.stack  # a stand-in, `bench run` and `aiperf profile`

# A client's own overhead adds to every TTFT (its p99 by up to 7 ms on a loaded 2-core host, AIPerf running a dozen
# processes), so the scheduled TTFT is long enough for 5% to hold it; TPOT is a mean over 23 gaps, so 10 ms is enough.
TTFT_MS, DECODE_MS, TOKENS = 300.0, 10.0, 24
# 10 req/s for 100 requests: about 10 s a client, about 5 requests in flight (each takes 300 + 23 * 10 ms).
# Gamma gaps of shape 100 (10% spread a gap): near-regular, so the rate drawn is within about 1% of the rate asked.
RATE, COUNT, BURSTINESS = 10.0, 100, 100.0
# Uncounted warm-up requests: the kit's go one at a time; AIPerf's at RATE for a second, so that its dozen processes
# are past their start when it begins to count (after 4 warm-up requests, its first counted second showed TTFT
# outliers of 5-40 ms here).
WARMUP, AIPERF_WARMUP = 4, 10
MODEL = "/m"
REL = 0.05


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("standin")
    config = tmp / "standin.json"
    config.write_text(json.dumps({"default": {"ttft_ms": TTFT_MS, "decode_ms": DECODE_MS, "batch_cost": 0,
                                              "startup_delay_s": 0}}))
    port = free_port()
    log = (tmp / "standin.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "testsupport.standin", "--model-path", MODEL, "--host", "127.0.0.1",
         "--port", str(port), "--enable-metrics"],
        cwd=REPO, env={**_env(), "STANDIN_CONFIG": str(config)}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=60)
        yield url
    finally:
        stop_group(proc, 10)
        log.close()


def _env() -> dict[str, str]:
    """This environment without the stand-in's and the kit's settings: only the test's own reach them."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "KIT_"))}


@pytest.fixture(scope="module")
def bench_repeat(standin, tmp_path_factory) -> RepeatSummary:
    out = tmp_path_factory.mktemp("bench")
    # The closed-loop level every cell measures too (--concurrency) runs first, at 10 in flight, to be short.
    r = subprocess.run(
        [sys.executable, "-m", "bench.run.cli", "--url", standin, "--no-switch", "--profiles", "baseline",
         "--spec", "off", "--api", "chat", "--request-rate", f"{RATE:g}", "--burstiness", f"{BURSTINESS:g}",
         "--num-prompts", str(COUNT), "--max-tokens", str(TOKENS), "--ignore-eos", "--repeats", "1",
         "--concurrency", "10", "--warmup", str(WARMUP), "--out", str(out)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    _, cells = bundle.load(run_dir)
    (cell,) = cells
    assert cell.valid, cell.invalid_reason
    (rep,) = [rep for rep in cell.per_repeat if rep.request_rate == RATE]
    assert rep.completed == COUNT and rep.failed == 0
    return rep


@pytest.fixture(scope="module")
def aiperf(standin, bench_repeat, tmp_path_factory) -> AIPerfRun:  # after bench's run: never both at once
    tmp = tmp_path_factory.mktemp("aiperf")
    load = OpenLoad(rate=RATE, count=COUNT, burstiness=BURSTINESS, output_tokens=TOKENS, warmup=AIPERF_WARMUP)
    run = aiperf_client.profile(standin, MODEL, load, tmp / "artifacts", tmp / "hf")
    assert run.completed == COUNT and run.output_tokens_p50 == TOKENS
    return run


def _near(got: float, want: float, what: str) -> None:
    print(f"{what}: {got:.4g} against {want:.4g} ({got / want - 1:+.2%})")  # the figures, shown with -s or -rA
    assert got == pytest.approx(want, rel=REL), f"{what}: {got:.4g} against {want:.4g} ({got / want - 1:+.1%})"


def test_the_kit_sends_at_the_rate_it_drew_and_the_rate_asked(bench_repeat):
    # the drawn schedule is scaled to the rate asked (bench/client/arrivals.py), so its schedule's rate is RATE
    assert bench_repeat.request_rate == RATE
    _near(bench_repeat.achieved_rate, RATE, "bench achieved rate vs its schedule, --request-rate")


def test_the_rates_agree_with_aiperf(bench_repeat, aiperf):
    # The comparable rate is the send rate, (n - 1) / (last send - first send), taken from the same definition on
    # both sides: bench's achieved_rate, and AIPerf's per-request request_start_ns (profile_export.jsonl). It says
    # whether each client kept its arrivals. Request throughput (completed / duration) also holds the last request's
    # latency and where each client starts its clock, so it is compared too, but it is no send rate.
    # Each client draws its own gaps (the kit from --seed, AIPerf from --random-seed), so their two send rates differ
    # by their draws, 1-2% at shape BURSTINESS over COUNT requests, not only by how well they keep them.
    _near(aiperf.achieved_rate, RATE, "AIPerf send rate vs --request-rate")
    _near(bench_repeat.achieved_rate, aiperf.achieved_rate, "bench achieved rate vs AIPerf send rate")
    _near(bench_repeat.request_throughput, aiperf.request_throughput, "bench request throughput vs AIPerf's")


def test_ttft_agrees_with_aiperf_and_the_schedule(bench_repeat, aiperf):
    ttft = bench_repeat.ttft
    _near(ttft.median, aiperf.ttft_p50, "bench TTFT p50 vs AIPerf's")
    _near(ttft.p99, aiperf.ttft_p99, "bench TTFT p99 vs AIPerf's")
    for who, p50, p99 in (("bench", ttft.median, ttft.p99), ("AIPerf", aiperf.ttft_p50, aiperf.ttft_p99)):
        _near(p50, TTFT_MS, f"{who} TTFT p50 vs the stand-in's ttft_ms")
        _near(p99, TTFT_MS, f"{who} TTFT p99 vs the stand-in's ttft_ms")


def test_tpot_and_latency_agree_with_aiperf_and_the_schedule(bench_repeat, aiperf):
    # AIPerf's inter-token latency is per request (latency - TTFT) / (output tokens - 1): the kit's TPOT.
    _near(bench_repeat.tpot.median, aiperf.itl_p50, "bench TPOT p50 vs AIPerf inter-token latency p50")
    _near(bench_repeat.tpot.median, DECODE_MS, "bench TPOT p50 vs the stand-in's decode_ms")
    _near(aiperf.itl_p50, DECODE_MS, "AIPerf inter-token latency p50 vs the stand-in's decode_ms")
    e2e = TTFT_MS + (TOKENS - 1) * DECODE_MS
    _near(bench_repeat.e2e_latency.median, aiperf.latency_p50, "bench e2e latency p50 vs AIPerf request latency p50")
    _near(bench_repeat.e2e_latency.median, e2e, "bench e2e latency p50 vs the stand-in's schedule")
