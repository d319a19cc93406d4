"""The tune's own cost per cell, beyond switching and measuring (target: at most 1 s a cell).

Runs a real `launcher serve` (supervisord + control API) over the SIMULATED stand-in server and
`bench tune` as its own process, `--runs` times into fresh folders, over `--profiles` (each extends
baseline with its own speed) under spec off. For each run, from the process's wall time and the
per-cell wall times tune.json records (switch, health gate, warm-up, repeats: what the server takes):

  in-loop overhead per cell  = (tune's elapsed - sum of cell walls) / cells   (planning, journal, gate)
  whole overhead per cell    = (process wall - sum of cell walls) / cells     (+ start-up, bundle, plot)

and prints the median over runs of each.

    .venv/bin/python tools/bench_tune_overhead.py [--runs 3] [--profiles 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testsupport.stack import REPO, standin_stack  # noqa: E402

STANDIN = {"default": {"startup_delay_s": 0.2, "ttft_ms": 5, "decode_ms": 3, "verify_ms": 4, "accept_length": 2.0}}


def one_run(stack, out: Path, profiles: list[str]) -> dict[str, float]:
    argv = [sys.executable, "-m", "bench", "tune", "--url", stack.server_url, "--control", stack.control_url,
            "--profiles", ",".join(["baseline", *profiles]), "--spec", "off", "--max-tokens", "24",
            "--num-prompts", "2", "--warmup", "1", "--budget", "30m", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env["KIT_GATE_MIN_TOKENS"] = "32"  # 2 prompts x 24 tokens: the tune's own cost is measured, not the gate
    env.update(KIT_CONTROL_TOKEN=stack.token, PYTHONPATH=str(REPO), KIT_PROFILES_DIR=str(stack.profiles_dir))
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench tune exited {proc.returncode}: {proc.stderr[-2000:]}")
    tune = json.loads(next(out.glob("*/tune.json")).read_text())
    t = tune["timing"]
    cells = t["cells_measured"]
    return {"cells": cells, "process_wall_s": wall, "elapsed_s": t["elapsed_s"], "cell_walls_s": t["measuring_s"],
            "in_loop_per_cell_s": (t["elapsed_s"] - t["measuring_s"]) / cells,
            "whole_per_cell_s": (wall - t["measuring_s"]) / cells,
            "winner": (tune["winner"] or {}).get("label")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--profiles", type=int, default=6, help="profiles besides baseline (default 6)")
    p.add_argument("--out", default=None, help="also write the report to this file")
    a = p.parse_args()
    lines = [f"# bench tune overhead, SIMULATED stand-in server, {a.runs} run(s), baseline + {a.profiles} profiles, spec off"]
    with tempfile.TemporaryDirectory(prefix="tune-overhead-") as tmp, standin_stack(Path(tmp) / "stack", STANDIN) as stack:
        names = []
        for i in range(a.profiles):
            name = f"speed{i}"
            decode = 3.0 / (1.0 + 0.15 * (i + 1))  # each a little faster than the one before
            (stack.profiles_dir / f"{name}.toml").write_text(
                f'description = "overhead bench: speed {i}"\nextends = "baseline"\n[env]\nSTANDIN_DECODE_MS = "{decode:.3f}"\n')
            names.append(name)
        runs = []
        lines.append("run  cells  process_wall_s  elapsed_s  cell_walls_s  in_loop_per_cell_s  whole_per_cell_s  winner")
        for r in range(a.runs):
            res = one_run(stack, Path(tmp) / f"out{r}", names)
            runs.append(res)
            lines.append(f"{r:>3}  {res['cells']:>5}  {res['process_wall_s']:>14.2f}  {res['elapsed_s']:>9.2f}  "
                         f"{res['cell_walls_s']:>12.2f}  {res['in_loop_per_cell_s']:>18.3f}  {res['whole_per_cell_s']:>16.3f}  "
                         f"{res['winner']}")
            print(lines[-1], flush=True)
    inner = statistics.median(r["in_loop_per_cell_s"] for r in runs)
    whole = statistics.median(r["whole_per_cell_s"] for r in runs)
    lines.append(f"median overhead per cell: in-loop {inner:.3f} s, whole process {whole:.3f} s (target <= 1 s)")
    print("\n".join(lines[:2] + lines[-1:]))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
