"""The SIMULATED scenario of `bench tune --adaptive` that its stack test and `tools/tune_adaptive.py` run: one
stand-in setting, one command, so the figures in docs/tune.md come from what the test checks.

The stand-in's batching model (testsupport/standin/simulation.py `batch_factor`, batch_cost 2) makes more EAGLE
steps pay at concurrency 1 and fewer above it; under --speculative-adaptive it runs, for the batch it serves, the
steps the config's tier gives (standin/engine.py `Engine.pass_figures`, routed as SGLang routes). Computed from that
model, (3,1,4) is 1.43 times as fast as (1,1,2) at concurrency 1 and (1,1,2) 1.48 and 1.58 times as fast as (3,1,4)
at 2 and 4; both beat no speculation at every level. So an adaptive plan of (3,1,4) at batch 1 and (1,1,2) above
leads the best single point by about 13% on the geometric mean over the levels. `off` fills no tier: a 0-step tier
is still an EAGLE pass (bench/tune/adaptive.py).
"""

from __future__ import annotations

from pathlib import Path

STANDIN = {"default": {"startup_delay_s": 0.2, "ttft_ms": 10, "decode_ms": 6, "verify_ms": 6, "accept_length": 4.0,
                       "batch_cost": 2.0}}
LEVELS = (1, 2, 4)
# 4 prompts of 16 tokens compare 64 tokens, under the gate's default of 200 ("not enough evidence"): lowered
ENV = {"KIT_GATE_MIN_TOKENS": "32"}
FLAGS = ("--profiles", "baseline", "--spec", "off,eagle3", "--eagle3", "1,1,2;3,1,4", "--adaptive",
         "--concurrency", ",".join(map(str, LEVELS)), "--max-tokens", "16", "--num-prompts", "4", "--warmup", "1",
         "--budget", "10m", "--switch-timeout", "60", "--health-timeout", "30", "--final-blocks", "6",
         "--final-repeats", "6")


def tune_args(server_url: str, control_url: str, out: Path) -> list[str]:
    """`bench tune`'s arguments against a stack."""
    return ["tune", "--url", server_url, "--control", control_url, *FLAGS, "--out", str(out)]
