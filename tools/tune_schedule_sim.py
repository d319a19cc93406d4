"""Seeded simulation of the tune's final: false-winner rate and power of the decision rule
(bench/tune/decision.py) under the interleaved schedule (one switch per repeat) and the mirrored blocks
(bench/tune/schedule.py), and the switches each costs.

The model of a repeat's tok/s: the arm's true mean × (1 + noise + drift + offset), where
- noise: each repeat's own, normal with sd `--cv` (3.4%: the spread measured on the demo's stand-in
  runs and the kit's evidence, docs/tune.md);
- drift: linear over the whole final, from -drift/2 to +drift/2 (a host warming up, a neighbour's job);
- offset: one normal draw with sd `--restart-sd` per switch, shared by the repeats of that block (a
  restart that lands the server in a slightly different state: allocator, clocks, compile caches);
- burst (`--burst`, off by default): one stretch of 20-40% of the final, at a random place, in which every
  repeat is slowed by up to `--burst` (a neighbour's job on a shared host, another test on a loaded CI
  machine): time-correlated noise that a block absorbs whole.

Each schedule is decided twice: as the product decides (bench/tune/decision.py: resample runs, then their
repeats) and, for comparison, with every repeat taken as independent.

Cases: `equal` (three arms alike: any winner is false), `gain` (one finalist `--gain` faster than the
running plan, the other equal to it: power is how often the faster one is chosen).

    .venv/bin/python tools/tune_schedule_sim.py --seeds 1000 --resamples 4000 --out docs/evidence/tune-schedule/sim.log
    .venv/bin/python tools/tune_schedule_sim.py --seeds 1000 --resamples 4000 --burst 0.1 \
        --out docs/evidence/tune-schedule/sim-burst.log
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tune import schedule  # noqa: E402
from bench.tune.decision import decide  # noqa: E402

ARMS = ("inc", "a", "b")  # the running plan first, as the runner orders them


def interleaved(arms, repeats):
    return [schedule.Run(arm, 1, k) for k in range(repeats) for arm in arms]


def simulate(runs, means, rng, cv, drift, restart_sd, burst):
    total = sum(r.repeats for r in runs)
    length = int(total * rng.uniform(0.2, 0.4)) if burst else 0
    start = int(rng.integers(0, total - length + 1)) if burst else 0
    slow = rng.uniform(0.5, 1.0) * burst
    t = 0
    out: dict[str, list[list[float]]] = {a: [] for a in means}
    for r in runs:
        offset = rng.normal(0, restart_sd)
        values = []
        for _ in range(r.repeats):
            d = drift * (t / max(1, total - 1) - 0.5) - (slow if start <= t < start + length else 0.0)
            values.append(means[r.arm] * (1 + rng.normal(0, cv) + d + offset))
            t += 1
        out[r.arm].append(values)
    return out


def rates(kind, runs, a, by_run):
    means = {"a": 100.0, "b": 100.0, "inc": 100.0}
    if kind == "gain":
        means["a"] = 100.0 * (1 + a.gain)
    hits = 0
    for seed in range(a.seeds):
        rng = np.random.default_rng(seed)
        samples = simulate(runs, means, rng, a.cv, a.drift, a.restart_sd, a.burst)
        if not by_run:
            samples = {k: [v for run in arm for v in run] for k, arm in samples.items()}
        d = decide(samples, "inc", seed=seed, resamples=a.resamples)
        chose = d.outcome in ("winner", "tie")
        hits += (chose if kind == "equal" else chose and d.chosen == "a")
    return hits / a.seeds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--repeats", type=int, default=8, help="final repeats per arm (default 8)")
    p.add_argument("--cv", type=float, default=0.034)
    p.add_argument("--drift", type=float, default=0.02, help="linear drift over the final, end to end (default 2%%)")
    p.add_argument("--restart-sd", type=float, default=0.005, help="sd of a per-switch offset (default 0.5%%)")
    p.add_argument("--burst", type=float, default=0.0, help="largest slowdown of a burst of load (default 0: none)")
    p.add_argument("--gain", type=float, default=0.03)
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--out", default=None, help="also write the table here")
    a = p.parse_args(argv)
    schedules = {
        "interleaved (1 repeat per switch)": interleaved(ARMS, a.repeats),
        "mirrored, 2 blocks": schedule.mirrored(list(ARMS), a.repeats, 2),
        "mirrored, 4 blocks": schedule.mirrored(list(ARMS), a.repeats, 4),
    }
    lines = [f"seeds {a.seeds}, {a.repeats} repeats per arm, 3 arms (running plan + 2 finalists), cv {a.cv:.1%}, "
             f"drift {a.drift:.1%}, per-switch offset sd {a.restart_sd:.1%}, burst up to {a.burst:.0%}, "
             f"gain {a.gain:.0%}, {a.resamples} bootstrap resamples",
             f"{'schedule':<36} {'switches':>8} {'false winners':>14} {'power':>7} {'false winners, repeats as iid':>30}"]
    for name, runs in schedules.items():
        fw = rates("equal", runs, a, by_run=True)
        pw = rates("gain", runs, a, by_run=True)
        iid = rates("equal", runs, a, by_run=False)
        lines.append(f"{name:<36} {schedule.switches(runs):>8} {fw:>14.1%} {pw:>7.1%} {iid:>30.1%}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
