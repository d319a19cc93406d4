"""Derive the correctness gate's calibrated limits from the raw decodes of tools/gpu/numerics_calibration.py.

The GPU script decodes, per model (dense and mixture-of-experts, two depths) and per seed (a distinct prompt
set), the reference (`ring`, NCCL's order) and variants: correct ones (another order, the same order again,
the reference at another batch size) and broken ones (a stale row, a dropped or doubled partial, another
request's rows), and keeps every position's top-k token ids and log-probabilities (`<model>.npz`,
`<model>.json`). This script judges each run with the kit's own gate (bench/run/logprob_gate.py): its
statistics against `ring` of the same seed, under limits from the null, `ring@64` (the reference decoded at
batch 64 instead of 128) against `ring`, as `bench run` takes the reference at two batch sizes.

It prints and writes (`--out FILE`):
* every run's statistics, its ratio to the null and its verdict under the limits now in the module;
* what FLOOR and NO_NULL rest on: the dense models' correct maximum and broken minimum of each statistic (their
  null is zero: FLOOR lies between), the most any correct variant reached (NO_NULL: 10% above it), the factor
  each correct run needs over FLOOR, and the least room a correct run had under its limit;
* the false-fail rate of correct variants and the miss rate of broken ones, over every seed, and again on
  random subsets of the prompts the size of `bench run`'s default workload (16 prompts);
* the detection limit: the smallest scanned fault every seed of it failed.

    python3 tools/gate_calibration.py DIR [DIR ...] --out docs/evidence/logprob-gate/calibration.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.run import logprob_gate as g  # noqa: E402

REFERENCE, NULL = "ring", "ring@64"
SUBSET_PROMPTS, SUBSETS = 16, 20


def load(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, list[g.TokenLogprob]]]]:
    """A model's metadata and each run's decode: prompt index -> rows."""
    import numpy as np

    meta = json.loads(path.with_suffix(".json").read_text())
    arrays = np.load(path)
    runs: dict[str, dict[str, list[g.TokenLogprob]]] = {}
    for key in meta["runs"]:
        ids, lps = arrays[f"{key}.top_ids"], arrays[f"{key}.top_lp"]
        decode = {}
        for p in range(ids.shape[0]):
            pi, pl = ids[p].tolist(), lps[p].tolist()
            decode[str(p)] = [g.TokenLogprob(i[0], lp[0], dict(zip(i, lp, strict=True))) for i, lp in zip(pi, pl, strict=True)]
        runs[key] = decode
    return meta, runs


def null_of(meta: dict[str, Any], seed: int) -> str:
    """The seed's null: the first reference decoded at another batch size (`ring@B`) the run lists."""
    return next((k for k, v in meta["runs"].items() if v["seed"] == seed and v["variant"].startswith(f"{REFERENCE}@")),
                f"{NULL}.s{seed}")


def subset(decode: dict[str, list[g.TokenLogprob]], keys: list[str]) -> dict[str, list[g.TokenLogprob]]:
    return {k: decode[k] for k in keys}


def judge(runs: dict[str, Any], meta: dict[str, Any], t: g.Thresholds, keys: list[str] | None = None) -> dict[str, Any]:
    """Every run's statistics and verdict against its seed's reference under the null's limits."""
    out = {}
    for key, info in meta["runs"].items():
        seed = info["seed"]
        ref_key, null_key = f"{REFERENCE}.s{seed}", null_of(meta, seed)
        if key in (ref_key, null_key) or ref_key not in runs or null_key not in runs:
            continue
        pick = keys or list(runs[ref_key])
        ref = subset(runs[ref_key], pick)
        null = g.Null(f"{null_key} against {ref_key}", g.compare(ref, subset(runs[null_key], pick), t.top_k))
        tol = g.tolerance(t, null)
        st = g.compare(ref, subset(runs[key], pick), t.top_k)
        verdict, reasons = g.verdict(st, t, tol)
        ratios = {k: (st.value(k) or 0.0) / v if (v := null.stats.value(k)) else None for k in g.JUDGED}
        limit = {k: getattr(tol.limits, k) for k in g.JUDGED}
        out[key] = {"variant": info["variant"], "seed": seed, "correct": info["correct"], "fault": info.get("fault"),
                    "stats": st.as_dict(), "null": null.stats.as_dict(), "ratios": ratios, "verdict": verdict,
                    "reasons": reasons, "basis": tol.basis, "limit": limit, "held_out_loss": info.get("held_out_loss")}
    return out


def derive(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the module's constants rest on, and how the verdicts under them came out (every seed, 128 prompts)."""
    runs = [(m, r) for m, rs in models.items() for r in rs.values()]
    scanned = {r["variant"] for _, r in runs if is_scan(r["variant"])}
    correct = [(m, r) for m, r in runs if r["correct"]]
    broken = [(m, r) for m, r in runs if not r["correct"] and r["variant"] not in scanned]

    def most(rows, k):
        return max((r["stats"][k] for _, r in rows if r["stats"][k] is not None), default=None)

    def least(rows, k):
        return min((r["stats"][k] for _, r in rows if r["stats"][k] is not None), default=None)

    out: dict[str, Any] = {"statistics": {}}
    for k in g.JUDGED:
        dense_ok, dense_bad = most([x for x in correct if x[0].startswith("dense")], k), \
            least([x for x in broken if x[0].startswith("dense")], k)
        # the factor each correct run needs over the floor: (stat - floor) / null
        need = [((r["stats"][k] or 0.0) - getattr(g.FLOOR, k)) / r["null"][k] for _, r in correct
                if r["null"][k] and r["stats"][k] is not None]
        out["statistics"][k] = {
            "dense_correct_max": dense_ok, "dense_broken_min": dense_bad,
            "floor_geomean": math.sqrt(dense_ok * dense_bad) if dense_ok and dense_bad and dense_bad > dense_ok else None,
            "correct_max": most(correct, k), "no_null_with_10pct_room": round(1.1 * most(correct, k), 4),
            "factor_needed_by_correct": max(need, default=None),
            "least_room_of_a_correct_run": min((r["limit"][k] / r["stats"][k] for _, r in correct if r["stats"][k]),
                                               default=None),
        }
    for label, rows in (("correct", correct), ("broken", broken)):
        bad = [r for _, r in rows if (r["verdict"] != g.PASS if label == "correct" else r["verdict"] != g.FAIL)]
        out[f"{label}_runs"] = len(rows)
        out[f"{label}_wrong_verdicts"] = len(bad)
        out[f"{label}_wrong_rate"] = len(bad) / len(rows) if rows else None
    caught: dict[str, dict[str, int]] = {}
    for m, r in broken + [(m, r) for m, r in runs if r["variant"] in scanned]:
        c = caught.setdefault(f"{m} {r['variant']}", {"runs": 0, "failed": 0})
        c["runs"] += 1
        c["failed"] += r["verdict"] == g.FAIL
    out["caught"] = caught
    return out


def is_scan(variant: str) -> bool:
    """A fault at another rate than the main one (the detection-limit scan): `drop@1000`, `stale@512`."""
    return "@" in variant and not variant.startswith(REFERENCE)


def subsets(loaded: dict[str, tuple[dict, dict]], t: g.Thresholds, seed: int = 0) -> dict[str, Any]:
    """Wrong verdicts on random SUBSET_PROMPTS-prompt subsets of each seed's prompts (`bench run`'s default
    workload size), per model and over all: correct runs that FAIL or go unverified, broken ones that do not FAIL."""
    rng = random.Random(seed)
    counts: dict[str, list[int]] = {}
    for model, (meta, runs) in loaded.items():
        n = len(next(iter(runs.values())))
        for _ in range(SUBSETS):
            keys = [str(k) for k in rng.sample(range(n), min(SUBSET_PROMPTS, n))]
            for r in judge(runs, meta, t, keys).values():
                if is_scan(r["variant"]):
                    continue
                side = "correct" if r["correct"] else "broken"
                wrong = r["verdict"] != (g.PASS if r["correct"] else g.FAIL)
                for key in (f"{model} {side}", side):
                    c = counts.setdefault(key, [0, 0])
                    c[0] += 1
                    c[1] += wrong
    return {"subset_prompts": SUBSET_PROMPTS, "subsets_per_model": SUBSETS,
            "wrong": {k: {"runs": v[0], "wrong": v[1], "rate": v[1] / v[0]} for k, v in sorted(counts.items())}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="folders with <model>.npz and <model>.json")
    p.add_argument("--out", type=Path, help="write the runs, verdicts and derived limits here (JSON)")
    p.add_argument("--no-subsets", action="store_true", help="skip the 16-prompt subset rates (slow)")
    args = p.parse_args()
    t = g.thresholds({})  # the defaults, whatever this shell sets
    loaded, judged = {}, {}
    for d in args.dirs:
        for npz in sorted(d.glob("*.npz")):
            meta, runs = load(npz)
            loaded[npz.stem] = (meta, runs)
            judged[npz.stem] = judge(runs, meta, t)
    if not judged:
        print(f"error: no <model>.npz under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 2
    hdr = f"{'model':9s} {'run':16s} {'ok?':4s} {'tokens':>6s} {'mean':>7s} {'p99':>6s} {'max':>6s} {'gap':>6s} " \
          f"{'r_mean':>6s} {'r_p99':>6s} {'r_gap':>6s}  verdict"
    print(hdr)
    for model, rows in judged.items():
        for key, r in rows.items():
            st, ra = r["stats"], r["ratios"]

            def f(x, w=6, d=3):
                return f"{x:{w}.{d}f}" if isinstance(x, float) else f"{'-':>{w}s}"
            print(f"{model:9s} {key:16s} {'yes' if r['correct'] else 'no':4s} {st['tokens']:6d} {f(st['mean_delta'], 7, 4)} "
                  f"{f(st['p99_delta'])} {f(st['max_delta'])} {f(st['max_flip_gap'])} {f(ra['mean_delta'], 6, 2)} "
                  f"{f(ra['p99_delta'], 6, 2)} {f(ra['max_flip_gap'], 6, 2)}  {r['verdict']}"
                  + (f" ({'; '.join(r['reasons'])})" if r["verdict"] != g.PASS else ""))
    derived = derive(judged)
    if not args.no_subsets:
        derived["subsets"] = subsets(loaded, t)
    derived["module"] = {"null_factor": t.null_factor, "floor": g.FLOOR.__dict__, "no_null": g.NO_NULL.__dict__,
                         "detection_limit": g.DETECTION_LIMIT}
    print(json.dumps(derived, indent=2))
    if args.out:
        settings = {m: meta.get("settings") for m, (meta, _) in loaded.items()}
        args.out.write_text(json.dumps({"models": judged, "derived": derived, "settings": settings}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
