"""Fleet figures: requests served and failed through sglang-router during a rolling switch of 3 hosts,
and the latency the router adds over talking to a server directly.

Three real `launcher serve` stacks over the SIMULATED stand-in on loopback, behind a real sglang-router
started by `launcher fleet router`. (1) A load loop of /generate requests runs through the router while
`launcher fleet switch` moves every host to nccl-tuned and back. (2) The same small request is sent
N times directly to one server and N times through the router, interleaved (ABAB), so machine noise
hits both; p50 and p99 of each and their difference are printed. Targets: 0 failed requests.

    .venv/bin/python tools/bench_fleet.py [--requests 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testsupport.stack import FleetStack, KitStack  # noqa: E402

BODY = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=200, help="requests per path for the overhead figure")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stacks = [KitStack(root / f"s{i}", "baseline", "off", {"STANDIN_STARTUP_DELAY_S": "1"}) for i in range(3)]
        fleet = None
        try:
            for s in stacks:
                s.start(timeout=60)
            (root / "fleet").mkdir()
            fleet = FleetStack(root / "fleet", stacks).start()
            served, failed, errors, stop = [0], [0], [], threading.Event()

            def load() -> None:
                with httpx.Client(timeout=60) as c:
                    while not stop.is_set():
                        try:
                            r = c.post(f"{fleet.url}/generate", json=BODY)
                            ok = r.status_code == 200
                        except httpx.HTTPError as exc:
                            ok, r = False, exc
                        (served if ok else failed)[0] += 1
                        if not ok:
                            errors.append(str(getattr(r, "status_code", r)))

            t = threading.Thread(target=load, daemon=True)
            t.start()
            t0 = time.monotonic()
            rcs = [fleet.cli("switch", target, "--spec", "off").returncode for target in ("nccl-tuned", "baseline")]
            took = time.monotonic() - t0
            stop.set()
            t.join(timeout=60)
            print(f"rolling switch of 3 hosts there and back ({took:.0f} s, exit codes {rcs}): "
                  f"{served[0]} requests served, {failed[0]} failed {errors[:3] if errors else ''}")

            direct, routed = [], []
            with httpx.Client(timeout=30) as c:
                for _ in range(10):  # warm both paths
                    c.post(f"{stacks[0].server_url}/generate", json=BODY)
                    c.post(f"{fleet.url}/generate", json=BODY)
                for i in range(args.requests * 2):
                    url, into = ((stacks[0].server_url, direct), (fleet.url, routed))[i % 2]
                    t1 = time.perf_counter()
                    c.post(f"{url}/generate", json=BODY).raise_for_status()
                    into.append((time.perf_counter() - t1) * 1000)
            print(f"latency of a 4-token /generate, {args.requests} each, interleaved (ms):")
            for name, xs in (("direct to a server", direct), ("through the router", routed)):
                print(f"  {name:<20} p50 {statistics.median(xs):7.2f}  p99 {pct(xs, 0.99):7.2f}")
            print(f"  router adds          p50 {statistics.median(routed) - statistics.median(direct):+7.2f}  "
                  f"p99 {pct(routed, 0.99) - pct(direct, 0.99):+7.2f}")
            return 0 if failed[0] == 0 and rcs == [0, 0] else 1
        finally:
            if fleet:
                fleet.stop()
            for s in stacks:
                s.stop()


if __name__ == "__main__":
    raise SystemExit(main())
