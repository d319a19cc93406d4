"""Cost of the control API's /metrics: scrape latency with a long switch history, and whether scraping
during a switch changes the switch's timing.

Runs a real `launcher serve` (supervisord + control API) over the SIMULATED stand-in server, with
`--history` synthetic switches written into history.jsonl before it starts (realistic lines: labels,
durations, backends, a log tail on failures). Then:
1. `--scrapes` scrapes back to back on one keep-alive connection: p50/p99/max latency as the client
   sees it (target p99 <= `--target-ms`);
2. `--pairs` pairs of switches, interleaved (ABBA order), one switch of each pair with a scrape every
   `--every` seconds while it runs, one without: the switches' durations side by side, and the
   latency of the scrapes taken during a switch.

    .venv/bin/python tools/bench_metrics.py [--history 10000] [--scrapes 2000] [--pairs 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from launcher.runtime.core.states import Outcome  # noqa: E402
from testsupport.stack import KitStack  # noqa: E402

PROFILES = ("baseline", "nccl-tuned", "custom-ar", "fused", "mscclpp")


def synthetic_history(path: Path, n: int, seed: int = 7) -> int:
    """n history lines shaped like the switch writes them; returns the bytes written."""
    rng = random.Random(seed)
    outcomes = [Outcome.SWITCHED] * 80 + [Outcome.ROLLED_BACK] * 10 + [Outcome.DEGRADED] * 4 + \
        [Outcome.ABORTED] * 3 + [Outcome.FAILED, Outcome.INTERRUPTED, Outcome.INTERRUPTED]
    t = time.time() - n * 600
    lines = []
    for i in range(n):
        a, b = rng.sample(PROFILES, 2)
        outcome = rng.choice(outcomes)
        d = {"drain_s": round(rng.uniform(0, 5), 3), "stop_s": round(rng.uniform(1, 20), 3),
             "start_s": 0.02, "health_s": round(rng.uniform(30, 1500), 3), "activation_s": 0.3}
        d["total_s"] = round(sum(d.values()), 3)
        entry = {"ts": t + i * 600, "id": f"{i:012x}", "from": {"profile": a, "spec": "eagle3", "digest": f"{i:016x}"},
                 "to": {"profile": b, "spec": "eagle3", "digest": f"{i + 1:016x}"}, "outcome": outcome,
                 "durations": d, "error": None,
                 "backends": [{"name": "pcie-ipc", "expected": True, "active": True, "verdict": "active",
                               "evidence": "[TP0] FlashInfer PCIe-IPC workspace built [on every rank: TP0..TP7]"}]}
        if outcome in (Outcome.ROLLED_BACK, Outcome.FAILED):
            entry.update(error="health timeout", failed_step="health",
                         log_tail=[f"[TP{k % 8}] loading weights shard {k}/64" for k in range(30)])
        lines.append(json.dumps(entry, sort_keys=True))
    data = ("\n".join(lines) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def fmt_ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"p50 {statistics.median(ms):.2f} ms  p99 {pct(ms, 99):.2f} ms  max {max(ms):.2f} ms  (n={len(ms)})"


def scrape(client: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    r = client.get(url)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"/metrics answered {r.status_code}: {r.text[:200]}")
    return dt


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--history", type=int, default=10_000)
    p.add_argument("--scrapes", type=int, default=2000)
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--startup-delay", type=float, default=3.0)
    p.add_argument("--target-ms", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = p.parse_args()
    out: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        out.append(line)

    with tempfile.TemporaryDirectory() as tmp:
        stack = KitStack(Path(tmp), "baseline", "off", {"STANDIN_STARTUP_DELAY_S": str(args.startup_delay)})
        size = synthetic_history(stack.state_dir / "history.jsonl", args.history)
        t0 = time.monotonic()
        stack.start(timeout=120)
        say(f"SIMULATED server; history.jsonl: {args.history} synthetic switches, {size / 2**20:.1f} MiB; "
            f"serving after {time.monotonic() - t0:.1f} s")
        try:
            time.sleep(3)  # let the control API finish building SGLang's parser
            url = f"{stack.control_url}/metrics"
            st = stack.status()
            counted = sum(st["switches"]["outcomes"].values())
            say(f"/status switches counted from history: {counted} (history_truncated={st['switches']['history_truncated']})")
            with httpx.Client(timeout=10) as client:
                body = client.get(url).text
                say(f"/metrics body: {len(body)} bytes, {sum(1 for x in body.splitlines() if not x.startswith('#'))} samples")
                for _ in range(50):  # warm-up
                    scrape(client, url)
                idle = [scrape(client, url) for _ in range(args.scrapes)]
            say(f"idle scrape latency, back to back: {fmt_ms(idle)}")

            during: list[float] = []
            rows: list[tuple[bool, float, float]] = []  # (scraped, wall s, total_s)
            order = [b for i in range(args.pairs) for b in ((True, False) if i % 2 == 0 else (False, True))]
            for k, scraped in enumerate(order):
                target = "nccl-tuned" if k % 2 == 0 else "baseline"
                stop = threading.Event()

                def scraper(stop: threading.Event = stop) -> None:
                    with httpx.Client(timeout=10) as c:
                        while not stop.wait(args.every):
                            during.append(scrape(c, url))

                th = threading.Thread(target=scraper, daemon=True) if scraped else None
                if th:
                    th.start()
                t1 = time.monotonic()
                r = stack.switch(target, "off")
                wall = time.monotonic() - t1
                stop.set()
                if th:
                    th.join(10)
                body = r.json()
                if body.get("outcome") != "switched":
                    say(f"switch {k} -> {target} did not switch: {body.get('outcome')} {body.get('error')}")
                    return 1
                rows.append((scraped, wall, body["durations"]["total_s"]))
                say(f"switch {k + 1:2d}/{len(order)} -> {target:<10} {'scraped' if scraped else 'quiet  '}  "
                    f"wall {wall:6.3f} s  total_s {body['durations']['total_s']:6.3f} s")
        finally:
            stack.stop()
    with_s = [r[2] for r in rows if r[0]]
    without_s = [r[2] for r in rows if not r[0]]
    diff = statistics.median(with_s) - statistics.median(without_s)
    say(f"scrape latency during switches, one every {args.every:g} s: {fmt_ms(during)}")
    say(f"switch total_s median: scraped {statistics.median(with_s):.3f} s, quiet {statistics.median(without_s):.3f} s "
        f"(difference {diff:+.3f} s; spread quiet {min(without_s):.3f}-{max(without_s):.3f} s, "
        f"scraped {min(with_s):.3f}-{max(with_s):.3f} s)")
    p99 = pct([v * 1000 for v in idle + during], 99)
    ok = p99 <= args.target_ms
    say(f"p99 over all {len(idle) + len(during)} scrapes: {p99:.2f} ms (target <= {args.target_ms:g} ms): "
        f"{'ok' if ok else 'MISSED'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("$ .venv/bin/python tools/bench_metrics.py " + " ".join(sys.argv[1:]) + "\n" + "\n".join(out) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
