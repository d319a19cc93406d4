"""Switch overhead: total switch time minus the stand-in's configured start-up delay.

Runs a real `launcher serve` (supervisord + control API) over the SIMULATED stand-in server with no
in-flight requests and switches back and forth N times. Target: median overhead <= 2 s.

    .venv/bin/python tools/bench_switch.py [--switches 5] [--startup-delay 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testsupport.stack import temporary_stack  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--switches", type=int, default=5)
    p.add_argument("--startup-delay", type=float, default=3.0)
    p.add_argument("--target-s", type=float, default=2.0)
    args = p.parse_args()
    with temporary_stack({"STANDIN_STARTUP_DELAY_S": str(args.startup_delay)}) as stack:
        rows = []
        for i in range(args.switches):
            target = "nccl-tuned" if i % 2 == 0 else "baseline"
            t0 = time.monotonic()
            r = stack.switch(target, "off")
            total = time.monotonic() - t0
            body = r.json()
            if body.get("outcome") != "switched":
                print(f"switch {i} failed: {body}", file=sys.stderr)
                return 1
            d = body["durations"]
            rows.append((target, total, total - args.startup_delay, d))
            print(
                f"SIMULATED switch {i + 1}/{args.switches} -> {target:<10} total {total:6.3f} s  "
                f"overhead {total - args.startup_delay:6.3f} s  (drain {d['drain_s']:.3f}  stop {d['stop_s']:.3f}  "
                f"start {d['start_s']:.3f}  health {d['health_s']:.3f})"
            )
    med = statistics.median(r[2] for r in rows)
    print(f"SIMULATED median switch overhead over {len(rows)} switches: {med:.3f} s (target <= {args.target_s} s; "
          f"start-up delay {args.startup_delay} s subtracted)")
    return 0 if med <= args.target_s else 1


if __name__ == "__main__":
    raise SystemExit(main())
