"""`bench tune` at the target's cost ratio, on the SIMULATED demo server: a switch there reloads a model and
costs about 10 repeats. The stand-in's load delay (STANDIN_LOAD_DELAY_S: seconds before it listens, as SGLang
loading weights) makes each switch that long; everything else is `make demo-tune`. Per seed it prints the
measured switch and repeat times (and so the ratio), the switches made, the wall time, and whether the tune
picked the stand-in's optimum by its own model.

    .venv/bin/python tools/tune_ratio.py --seeds 1,2,3 --load-delay 3 --budget 15m --out results/tune-ratio
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testsupport.demo import TUNE_PROFILES, TUNE_SPECS, simulated_optimum  # noqa: E402


def switches(out: Path) -> int:
    """Cells the tune switched for (the journal's switch outcomes), plus the switch back at the end."""
    n = 0
    for line in (out / "journal.jsonl").read_text().splitlines():
        cell = (json.loads(line).get("detail") or {}).get("cell") or {}
        n += (cell.get("switch") or {}).get("outcome") == "switched"
    return n


def one(seed: int, args: argparse.Namespace, best: str) -> dict:
    out = Path(args.out) / f"seed-{seed}"
    env = {**os.environ, "STANDIN_LOAD_DELAY_S": str(args.load_delay)}
    t0 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "testsupport.demo", "--tune", "--out", str(out), "--budget", args.budget,
                         "--seed", str(seed)], cwd=REPO, env=env, check=False).returncode
    wall = time.monotonic() - t0
    found = sorted(out.glob("*/tune.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {"seed": seed, "rc": rc, "wall_s": wall}
    result = json.loads(found[-1].read_text())
    timing = result.get("timing") or {}
    picked = (result.get("winner") or {}).get("label")
    return {"seed": seed, "rc": rc, "wall_s": wall, "switch_s": timing.get("switch_s"), "repeat_s": timing.get("repeat_s"),
            "switches": switches(out), "picked": picked, "outcome": result["decision"].get("outcome"),
            "optimum": picked == best}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--load-delay", type=float, default=3.0, help="stand-in seconds before it listens, per start")
    p.add_argument("--budget", default="15m")
    p.add_argument("--out", default="results/tune-ratio")
    args = p.parse_args()
    best, truth = simulated_optimum(TUNE_PROFILES, TUNE_SPECS, 64)
    print(f"SIMULATED optimum by the stand-in's model: {best} ({truth[best]:.1f} tok/s)", flush=True)
    rows = [one(int(s), args, best) for s in args.seeds.split(",")]
    print("| seed | switch s | repeat s | ratio | switches (+1 back) | wall | picked | optimum |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sw, rep = r.get("switch_s"), r.get("repeat_s")
        ratio = f"{sw / rep:.1f}" if sw and rep else "-"
        print(f"| {r['seed']} | {sw or 0:.1f} | {rep or 0:.2f} | {ratio} | {r.get('switches', '-')} | "
              f"{r['wall_s'] / 60:.1f} min | {r.get('picked') or r.get('outcome') or 'rc ' + str(r['rc'])} | "
              f"{'yes' if r.get('optimum') else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
