"""Recovery after the control API is killed in the middle of a switch (SIMULATED server).

Runs a real `launcher serve` (supervisord + control API) over the stand-in and, N times: starts a
switch, waits until the journal says the phase is `health`, SIGKILLs the control API, and times how
long until supervisord has restarted it, the restarted one has resolved the journal, the history
holds the `interrupted` outcome and /status says serving with health ok. Half the trials go to a
healthy profile (kept), half to one that never becomes healthy (rolled back).

Then it checks that nothing was lost: one history entry per switch tried, the committed plan is the
one running, the real token still works, no journal is left, and no server process from an earlier
plan is still alive.

    .venv/bin/python tools/bench_recovery.py [--trials 6] [--startup-delay 1] [--health-timeout 4]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testsupport.net import ignore_http_errors, until  # noqa: E402
from testsupport.stack import KitStack, temporary_stack  # noqa: E402


def trial(stack: KitStack, target: str) -> tuple[float, dict]:
    before = len(stack.history())
    t = threading.Thread(target=lambda: ignore_http_errors(lambda: stack.switch(target, "off", timeout_s=120)))
    t.start()
    until(lambda: json.loads((stack.state_dir / "switch.json").read_text())["phase"] == "health", 60)
    os.kill(stack.control_pid(), signal.SIGKILL)
    t0 = time.monotonic()
    t.join()
    entry = until(lambda: len(h := stack.history()) > before and h[-1], 120)
    until(lambda: (s := stack.status())["state"] in ("serving", "rolled_back") and s["health"] == "ok", 120)
    return time.monotonic() - t0, entry


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--startup-delay", type=float, default=1.0)
    p.add_argument("--health-timeout", type=float, default=4.0)
    args = p.parse_args()
    rows: list[tuple[str, float, dict]] = []
    env = {"STANDIN_STARTUP_DELAY_S": str(args.startup_delay), "KIT_HEALTH_TIMEOUT_S": str(args.health_timeout)}
    with temporary_stack(env) as stack:
        for i in range(args.trials):
            target = ("nccl-tuned", "fused")[i // 2 % 2] if i % 2 == 0 else "hangs"
            secs, entry = trial(stack, target)
            rows.append((target, secs, entry))
            print(f"SIMULATED kill {i + 1}/{args.trials}: switch -> {target:<10} killed in phase "
                  f"{entry.get('interrupted_phase')}; outcome {entry['outcome']}/{entry.get('resolution')} "
                  f"recorded and healthy {secs:6.2f} s after the kill")
            if target != "hangs":  # go back to baseline for the next trial, a normal switch
                stack.switch("baseline", "off")
        hist = stack.history()
        st = stack.status()
        committed = json.loads((stack.state_dir / "committed.json").read_text())["plan"]
        served = stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"]
        # An authorized call with a bad body answers 400; an unauthorized one 401: changes nothing.
        def auth(token: str) -> int:
            return httpx.post(f"{stack.control_url}/switch", content=b"{}", timeout=5,
                              headers={"Authorization": f"Bearer {token}"}).status_code
        token_ok = auth(stack.token) == 400 and auth("wrong") == 401
        servers = [q for q in psutil.Process(stack.proc.pid).children(recursive=True)
                   if "testsupport.standin" in " ".join(q.cmdline())]
    switches_tried = 1 + args.trials + sum(1 for t, _, _ in rows if t != "hangs")  # start + kills + returns
    checks = {
        "one history entry per switch tried": len(hist) == switches_tried,
        "every kill recorded as interrupted": all(e["outcome"] == "interrupted" for _, _, e in rows),
        "healthy targets kept, unhealthy ones rolled back": all(
            e.get("resolution") == ("rolled_back" if t == "hangs" else "kept") for t, _, e in rows),
        "committed plan is the running one": committed["name"] == served == st["profile"],
        "no journal left": not st["phase"],
        "the real token still works": token_ok,
        "exactly one server process": len(servers) == 1,
    }
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'LOST'} {name}")
    kept = [s for t, s, _ in rows if t != "hangs"]
    rolled = [s for t, s, _ in rows if t == "hangs"]
    print(f"SIMULATED kill -> recorded healthy outcome: kept median {statistics.median(kept):.2f} s "
          f"(n={len(kept)}, max {max(kept):.2f}); rolled back median {statistics.median(rolled):.2f} s "
          f"(n={len(rolled)}, max {max(rolled):.2f}; includes the {args.health_timeout:.0f} s health timeout)")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
