"""Accuracy and overhead of the bench client against the stand-in with a known schedule.

    python tools/bench_accuracy.py [--requests-per-stream 2] [--max-tokens 128]

The stand-in (SIMULATED, a test double) is started with TTFT 100 ms, one verify pass every 20 ms
and accept length 2 (2 tokens per chunk). Its schedule is exact (launcher.standin.simulation), so
the truth is known: TTFT 100 ms, chunk gap 20 ms, TPOT = (chunks - 1) * 20 ms / (tokens - 1),
accept length = completion_tokens / spec_verify_ct. At concurrency 1 and 16 the script prints
what the client reports next to the truth, and the client's CPU time per streamed chunk:

* raw: time.process_time() of this process over the run / chunks received;
* floor: the same measure for the cheapest possible asyncio reader (a bare Protocol that only
  counts reads) on the same stream at the same concurrency: the cost of an event-loop wake-up
  and a socket read on this machine, which no Python client avoids. On bare metal it is a few
  microseconds; in a virtual machine a wake-up alone can cost 100-200 us;
* net: raw - floor, what the client itself adds per chunk (HTTP parsing, SSE and JSON handling).

Targets: TTFT, chunk gap and TPOT within 2% of the truth, accept length exact, net CPU per
chunk at most 50 us. Exit status 1 when any target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.client import ServerClient  # noqa: E402
from bench.workload import build_workload  # noqa: E402
from launcher.standin import simulation  # noqa: E402

TTFT_MS, VERIFY_MS, ACCEPT = 100.0, 20.0, 2.0
TOLERANCE = 0.02
CPU_TARGET_US = 50.0


class _CountingReader(asyncio.Protocol):
    """The cheapest possible asyncio stream reader: counts reads, parses nothing."""

    def __init__(self, done: asyncio.Future[int]):
        self.done = done
        self.reads = 0

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if b"[DONE]" in data and not self.done.done():
            self.done.set_result(self.reads)


async def _raw_request(host: str, port: int, body: bytes) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    transport, _ = await loop.create_connection(lambda: _CountingReader(done), host, port)
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    transport.write(head + body)
    try:
        return await done
    finally:
        transport.close()


async def floor_us(host: str, port: int, concurrency: int, per_stream: int, max_tokens: int) -> float:
    """CPU per chunk of a minimal asyncio reader on the same stream and concurrency.

    It does nothing but wake up and receive, so it is this machine's cost of an event-loop
    wake-up plus a socket read, the part of the client's CPU no Python client can avoid.
    """
    body = json.dumps({"text": "floor", "sampling_params": {"max_new_tokens": max_tokens}, "stream": True}).encode()
    await asyncio.gather(*(_raw_request(host, port, body) for _ in range(concurrency)))
    sem = asyncio.Semaphore(concurrency)

    async def one() -> int:
        async with sem:
            return await _raw_request(host, port, body)

    c0 = time.process_time()
    reads = await asyncio.gather(*(one() for _ in range(concurrency * per_stream)))
    return (time.process_time() - c0) / sum(reads) * 1e6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def truth(max_tokens: int) -> dict[str, float]:
    counts = simulation.chunk_token_counts(max_tokens, ACCEPT, True)
    offsets = simulation.chunk_offsets_s(len(counts), TTFT_MS, VERIFY_MS)
    n, verify = simulation.expected_counts(max_tokens, ACCEPT, True)
    e2e = offsets[-1]
    return {
        "ttft_ms": offsets[0] * 1000,
        "gap_ms": VERIFY_MS,
        "tpot_ms": (e2e - offsets[0]) / (n - 1) * 1000,
        "accept": n / verify,
    }


async def measure(url: str, concurrency: int, per_stream: int, max_tokens: int) -> dict[str, float]:
    async with ServerClient(url, max_tokens=max_tokens, concurrency=concurrency) as client:
        await client.wait_healthy(20)
        client.configure_from_server_info(await client.server_info())
        await client.run(build_workload("chat", concurrency), concurrency)  # warm-up: connections, caches
        prompts = build_workload("chat", concurrency * per_stream)
        c0, p0, t0 = cpu_s(), time.process_time(), time.perf_counter()
        records, _ = await client.run(prompts, concurrency)
        cpu, pcpu, wall = cpu_s() - c0, time.process_time() - p0, time.perf_counter() - t0
    bad = [r for r in records if not r.ok]
    if bad:
        raise SystemExit(f"request failed: {bad[0].error}")
    chunks = sum(r.chunks for r in records)
    raw = pcpu / chunks * 1e6
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    floor = await floor_us(host, int(port), concurrency, per_stream, max_tokens)
    return {
        "ttft_ms": statistics.fmean(r.ttft_s for r in records) * 1000,
        "gap_ms": statistics.fmean(g for r in records for g in r.chunk_gaps_s) * 1000,
        "tpot_ms": statistics.fmean(r.tpot_s for r in records) * 1000,
        "accept": sum(r.completion_tokens for r in records) / sum(r.spec_verify_ct for r in records),
        "accepts": sorted({r.accept_length for r in records}),
        "ttfts": sorted(round(r.ttft_s * 1000, 1) for r in records),
        "chunks": chunks,
        "busy": pcpu / wall,
        "cpu_raw_us": raw,
        "cpu_rusage_us": cpu / chunks * 1e6,
        "cpu_floor_us": floor,
        "cpu_net_us": max(0.0, raw - floor),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrency", default="1,16")
    args = p.parse_args()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIT_")}
    env.update(
        PYTHONPATH=os.pathsep.join(x for x in (str(REPO), env.get("PYTHONPATH", "")) if x),
        KIT_STANDIN_STARTUP_DELAY_S="0.2",
        KIT_STANDIN_TTFT_MS=str(TTFT_MS),
        KIT_STANDIN_VERIFY_MS=str(VERIFY_MS),
        KIT_STANDIN_ACCEPT_LENGTH=str(ACCEPT),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "launcher.standin", "--port", str(port), "--speculative-algorithm", "EAGLE3",
         "--speculative-num-draft-tokens", "4"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    t = truth(args.max_tokens)
    failed = False
    print(f"SIMULATED stand-in at {url}: TTFT {TTFT_MS:.0f} ms, a chunk every {VERIFY_MS:.0f} ms, "
          f"{ACCEPT:.0f} tokens per chunk, {args.max_tokens} tokens per request")
    try:
        loop = asyncio.new_event_loop()
        for c in (int(x) for x in args.concurrency.split(",")):
            m = loop.run_until_complete(measure(url, c, args.requests_per_stream, args.max_tokens))
            print(f"\nconcurrency {c}: {c * args.requests_per_stream} requests, {m['chunks']} chunks, "
                  f"client busy {m['busy']:.1%} of one core")
            for key, label in (("ttft_ms", "TTFT ms"), ("gap_ms", "chunk gap ms"), ("tpot_ms", "TPOT ms")):
                err = (m[key] - t[key]) / t[key]
                ok = abs(err) <= TOLERANCE
                failed |= not ok
                print(f"  {label:<14} reported {m[key]:8.3f}  truth {t[key]:8.3f}  error {err:+.2%}  "
                      f"{'ok' if ok else 'MISSED (> 2%)'}")
            print("  ttfts", m["ttfts"])
            exact = m["accept"] == t["accept"] and m["accepts"] == [t["accept"]]
            failed |= not exact
            print(f"  accept length  reported {m['accept']:8.3f}  truth {t['accept']:8.3f}  "
                  f"{'exact' if exact else 'MISSED (not exact)'}")
            ok = m["cpu_net_us"] <= CPU_TARGET_US
            failed |= not ok
            print(f"  client CPU per chunk: raw {m['cpu_raw_us']:.1f} us (getrusage {m['cpu_rusage_us']:.1f}), "
                  f"floor {m['cpu_floor_us']:.1f} us, net {m['cpu_net_us']:.1f} us  "
                  f"{'ok' if ok else f'MISSED (> {CPU_TARGET_US:.0f} us)'}")
        loop.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    print("\nSIMULATED server; all targets met" if not failed else "\nSIMULATED server; a target was MISSED")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
