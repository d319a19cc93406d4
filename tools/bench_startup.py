"""Start-up cost of the kit, against two targets.

1. sitecustomize: every SGLang process (the launcher, one per tensor-parallel rank, helpers) starts
   with sitecustomize/ on PYTHONPATH and applies the rendered profile.env, so its cost is paid about ten
   times per server start. Target: median `python -c pass` grows by at most 5 ms.
2. `python -m launcher show fused`: what users and `make` run interactively. In make show's kit-only
   venv (no sglang) it must not import sglang or torch; target: median wall time at most 300 ms. Where
   sglang is importable it runs SGLang's real parser, as `check` does (reported, no target).

Method: each command is a fresh subprocess timed with perf_counter from spawn to exit. Warm-up runs
are dropped. The two `python -c pass` variants run interleaved in alternating order (ABBA), so drift
in machine load hits both equally. Exit 0 when every target is met, 1 otherwise.

    .venv/bin/python tools/bench_startup.py [--runs 40] [--show-runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.progress import Progress

REPO = Path(__file__).resolve().parent.parent
SITE_DIR = REPO / "sitecustomize"
PROFILE = "fused"
SITE_TARGET_MS = 5.0
SHOW_TARGET_MS = 300.0
HEAVY_MODULES = ("sglang", "torch")
MODEL_ENV = {"MODEL_PATH": "/models/target", "DRAFT_MODEL_PATH": "/models/draft"}


def base_env() -> dict[str, str]:
    """The caller's environment without kit knobs or PYTHONPATH, plus model paths for `show`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KIT_") and k not in ("PYTHONPATH", "SPEC")
    }
    env.update(MODEL_ENV)
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall time of one subprocess in milliseconds; raises when it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = (time.perf_counter() - t0) * 1000.0
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode().strip()}")
    return elapsed


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "median_ms": statistics.median(samples),
        "mean_ms": statistics.fmean(samples),
        "sd_ms": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "min_ms": min(samples),
    }


def launcher(python: str, verb: str, *args: str, py_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python [py_flags] -m launcher VERB PROFILE ARGS` with the real CLI; exit with its error if it fails."""
    proc = subprocess.run([python, *py_flags, "-m", "launcher", verb, PROFILE, *args], cwd=REPO, env=base_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: launcher {verb} {PROFILE} failed: {proc.stderr.strip()[-500:]}")
    return proc


def render_state(python: str, state: Path) -> None:
    """Render the profile with the real CLI, as the container does before SGLang starts."""
    launcher(python, "render", "--state-dir", str(state))


def check_applied(python: str, env: dict[str, str], cwd: Path) -> None:
    """The measured variant must really apply the profile, or the comparison means nothing."""
    probe = "import os; print(os.environ.get('KIT_ACTIVE_PROFILE'), os.environ.get('NCCL_PROTO'))"
    out = subprocess.run(
        [python, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True
    ).stdout.split()
    if out != [PROFILE, "LL"]:
        raise SystemExit(f"error: sitecustomize did not apply {PROFILE} (child saw {out}); nothing measured")


def imported_modules(python: str) -> set[str]:
    """Top-level modules `launcher show` imports, from `-X importtime`."""
    proc = launcher(python, "show", py_flags=("-X", "importtime"))
    mods = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                mods.add(name.split(".")[0])
    return mods


def measure(args: argparse.Namespace) -> dict:
    py = args.python
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        tmp_path = Path(tmp)
        state = tmp_path / "state"
        render_state(py, state)
        cwd = tmp_path  # an empty folder: only PYTHONPATH decides which sitecustomize runs
        bare_env = base_env()
        kit_env = {**bare_env, "PYTHONPATH": str(SITE_DIR), "KIT_PROFILE_ENV": str(state / "profile.env")}
        check_applied(py, kit_env, cwd)
        pass_cmd = [py, "-c", "pass"]
        show_cmd = [py, "-m", "launcher", "show", PROFILE]
        bare: list[float] = []
        kit: list[float] = []
        show: list[float] = []
        with Progress(transient=True) as progress:
            task = progress.add_task(
                "python -c pass, with and without sitecustomize", total=args.warmup + args.runs
            )
            for i in range(args.warmup + args.runs):
                order = [("bare", bare_env), ("kit", kit_env)]
                if i % 2:
                    order.reverse()
                for label, env in order:
                    ms = timed(pass_cmd, env, cwd)
                    if i >= args.warmup:
                        (bare if label == "bare" else kit).append(ms)
                progress.advance(task)
            task = progress.add_task(f"launcher show {PROFILE}", total=args.warmup + args.show_runs)
            for i in range(args.warmup + args.show_runs):
                ms = timed(show_cmd, base_env(), REPO)
                if i >= args.warmup:
                    show.append(ms)
                progress.advance(task)
        heavy = sorted(m for m in imported_modules(py) if m in HEAVY_MODULES)
    # Where sglang is importable, show runs SGLang's real parser (as check does) and must import it;
    # the time target is for make show's kit-only venv, where it is not.
    parser = subprocess.run([py, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('sglang') is None)"],
                            env=base_env()).returncode == 0
    bare_s, kit_s, show_s = summary(bare), summary(kit), summary(show)
    delta = kit_s["median_ms"] - bare_s["median_ms"]
    return {
        "host": f"{platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}, "
        f"bytecode cache {'off (PYTHONDONTWRITEBYTECODE)' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'on'}",
        "python": py,
        "warmup_runs_dropped": args.warmup,
        "pass_bare": bare_s,
        "pass_sitecustomize": kit_s,
        "sitecustomize_delta_ms": delta,
        "sitecustomize_target_ms": SITE_TARGET_MS,
        "show": show_s,
        "show_target_ms": SHOW_TARGET_MS,
        "show_heavy_imports": heavy,
        "show_runs_sglang_parser": parser,
        "ok": {
            "sitecustomize": delta <= SITE_TARGET_MS,
            "show_time": parser or show_s["median_ms"] <= SHOW_TARGET_MS,
            "show_imports": ("sglang" in heavy) if parser else not heavy,
        },
    }


def fmt(s: dict) -> str:
    return f"median {s['median_ms']:7.1f} ms   mean {s['mean_ms']:6.1f} ± {s['sd_ms']:4.1f} ms   min {s['min_ms']:6.1f}   n={s['n']}"


def report(r: dict) -> str:
    ok = r["ok"]
    verdict = {True: "ok", False: "MISSED"}
    return "\n".join(
        [
            f"host: {r['host']}",
            f"method: fresh subprocess per run, perf_counter spawn-to-exit, {r['warmup_runs_dropped']} warm-up runs dropped, "
            "the two `python -c pass` variants interleaved (ABBA)",
            f"python -c pass                       {fmt(r['pass_bare'])}",
            f"python -c pass + sitecustomize       {fmt(r['pass_sitecustomize'])}",
            f"  sitecustomize cost (median delta)  {r['sitecustomize_delta_ms']:+.1f} ms "
            f"(target <= {r['sitecustomize_target_ms']:.0f} ms): {verdict[ok['sitecustomize']]}",
            f"python -m launcher show {PROFILE}       {fmt(r['show'])}",
            f"  wall time (median)                 {r['show']['median_ms']:.1f} ms "
            + ("(runs SGLang's parser here: no target)" if r["show_runs_sglang_parser"]
               else f"(target <= {r['show_target_ms']:.0f} ms): {verdict[ok['show_time']]}"),
            f"  imports sglang/torch               {', '.join(r['show_heavy_imports']) or 'neither'}: "
            f"{verdict[ok['show_imports']]}"
            + (" (expected: sglang is importable, so flags are checked)" if r["show_runs_sglang_parser"] else ""),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40, help="measured runs of each `python -c pass` variant")
    p.add_argument("--show-runs", type=int, default=15, help=f"measured runs of `launcher show {PROFILE}`")
    p.add_argument("--warmup", type=int, default=3, help="runs dropped before measuring")
    p.add_argument("--python", default=sys.executable, help="interpreter to measure (default: this one)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.runs < 2 or args.show_runs < 2:
        p.error("--runs and --show-runs need at least 2")
    result = measure(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0 if all(result["ok"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
