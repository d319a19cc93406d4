"""`make demo-real`: the demo's flow against real SGLang 0.5.23 on the CPU with a tiny random model.

Up (a real `launcher serve` over `python -m sglang.launch_server`, TP 2, the CPU overlay), a switch between
two of the kit's profiles (baseline -> nccl-tuned: different env, drained, stopped, started, health-gated on
the real /health, committed), `bench run` over both (its own switches, gate and bundle) and `bench report`.
Needs .venv-real (tools/real/install.sh; `make demo-real` builds it). Every line it prints carries LABEL:
the timings mean nothing about a GPU host.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from launcher.errors import RuntimeFailure, UserError, run_cli
from testsupport.real.model import make_model
from testsupport.real.realstack import REAL_VENV, START_TIMEOUT_S, RealStack, in_real_venv
from testsupport.stack import REPO

LABEL = "REAL SGLang 0.5.23 on CPU, tiny random model (timings mean nothing about a GPU host)"
PROFILES = ("baseline", "nccl-tuned")
# 2 prompts of 24 tokens compare 48 tokens: under the gate's default evidence (200), so the demo lowers it
# and says so, as `make demo` does
GATE_MIN_TOKENS = "40"


def say(text: str) -> None:
    print(f"[{LABEL}] {text}", flush=True)


def run_bench(stack: RealStack, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_", "NCCL_", "SGLANG_"))}
    env.update(KIT_CONTROL_TOKEN=stack.token, PYTHONPATH=str(REPO), KIT_GATE_MIN_TOKENS=GATE_MIN_TOKENS)
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, text=True, check=False)


def demo(out: Path, max_tokens: int) -> int:
    if not in_real_venv():
        raise UserError(f"make demo-real runs under {REAL_VENV}/bin/python (real SGLang 0.5.23): run "
                        "`make demo-real`, which builds it first (tools/real/install.sh)")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kit-demo-real-"))
    say(f"making the tiny random model (2-layer Llama, byte-level BPE trained here) in {work / 'model'}")
    model = make_model(work / "model" / "tiny-llama", seed=0)
    stack = RealStack(work / "stack", model, PROFILES[0])
    try:
        say(f"up: launcher serve, profile {PROFILES[0]}, spec off, TP 2 on the CPU (a start takes minutes here)")
        stack.start(START_TIMEOUT_S)
        st = stack.status()
        say(f"serving: {st['profile']}+{st['spec']} at {stack.server_url}, control API {stack.control_url}")
        say(f"switch: {PROFILES[0]} -> {PROFILES[1]} (drain, stop, start, health gate on the real /health, commit)")
        r = stack.switch(PROFILES[1], "off")
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code != 200 or body.get("outcome") != "switched":
            raise RuntimeFailure(f"the switch to {PROFILES[1]} answered HTTP {r.status_code}: {r.text[:500]}")
        say(f"switched in {body.get('durations', {}).get('total_s', 0):.1f} s: {body.get('durations')}")
        say(f"bench run over {', '.join(PROFILES)} (spec off; gate KIT_GATE_MIN_TOKENS={GATE_MIN_TOKENS}, lowered "
            "for 2 short prompts)")
        rc = run_bench(stack, "run", "--url", stack.server_url, "--control", stack.control_url,
                       "--profiles", ",".join(PROFILES), "--spec", "off", "--repeats", "1", "--num-prompts", "2",
                       "--max-tokens", str(max_tokens), "--warmup", "0", "--read-timeout", "600",
                       "--switch-timeout", str(int(3 * START_TIMEOUT_S)), "--health-timeout", str(int(START_TIMEOUT_S)),
                       "--out", str(out)).returncode
        if rc:
            raise RuntimeFailure(f"bench run exited {rc}")
        bundle = max((p for p in out.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        rc = run_bench(stack, "report", str(bundle)).returncode
        if rc:
            raise RuntimeFailure(f"bench report exited {rc}")
        say(f"report: {bundle / 'summary.md'}")
        return 0
    finally:
        say("down: stopping the server")
        stack.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testsupport.real.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/demo-real", help="results folder (default results/demo-real)")
    p.add_argument("--max-tokens", type=int, default=24)
    a = p.parse_args(argv)
    return run_cli(lambda: demo(Path(a.out), a.max_tokens))


if __name__ == "__main__":
    raise SystemExit(main())
