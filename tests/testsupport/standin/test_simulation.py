"""The stand-in's batching model and adaptive tiers (SIMULATED: testsupport/standin/simulation.py `batch_factor`,
`dynamic_chunks`; engine.py `Engine.pass_figures`): with batch_cost 0 the schedule is the fixed one, a growing
batch makes speculation pay less, and under --speculative-adaptive a batch runs the steps its tier gives, as
SGLang 0.5.23 routes it."""

from __future__ import annotations

import asyncio
import json

import pytest

from testsupport.standin import simulation
from testsupport.standin.engine import Engine
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import StandinSettings

EAGLE = ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


@pytest.mark.parametrize("n, accept", [(64, 2.0), (65, 2.5), (64, 2.5), (7, 1.0), (1, 3.0)])
def test_constant_figures_give_the_fixed_schedule(n, accept):
    got = list(simulation.dynamic_chunks(n, 40.0, lambda: (True, accept, 30.0)))
    counts = simulation.chunk_token_counts(n, accept, True)
    assert [c for c, _, _ in got] == counts
    assert [o for _, o, _ in got] == pytest.approx(simulation.chunk_offsets_s(len(counts), 40.0, 30.0))
    assert list(simulation.dynamic_chunks(0, 40.0, lambda: (True, accept, 30.0))) == [(0, 0.04, False)]


def test_figures_may_change_between_chunks():
    figures = iter([(True, 2.0, 10.0), (False, 1.0, 5.0), (True, 3.0, 10.0)] * 10)
    got = list(simulation.dynamic_chunks(8, 0.0, lambda: next(figures)))
    assert [(c, s) for c, _, s in got] == [(2, True), (1, False), (3, True), (2, True)]
    assert sum(c for c, _, _ in got) == 8 and [o for _, o, _ in got] == pytest.approx([0, 0.01, 0.015, 0.025])


def test_a_growing_batch_makes_speculation_pay_less():
    engine = Engine(StandinSettings(decode_ms=3, verify_ms=5, accept_length=2.4, batch_cost=2.0), parse_server_argv(EAGLE))
    off = Engine(StandinSettings(decode_ms=3, verify_ms=5, accept_length=2.4, batch_cost=2.0),
                 parse_server_argv(["--model-path", "/m"]))

    def gain(batch):  # speculation's tokens per ms over plain decoding's
        _, accept, interval = engine.pass_figures(batch)
        return (accept / interval) / (1 / off.pass_figures(batch)[2])

    assert gain(1) > 1.2 and gain(4) < 0.9 and gain(1) > gain(2) > gain(4)
    assert simulation.batch_factor(0.0, 16, 4) == 1.0 and simulation.batch_factor(0.5, 3, 2) == 3.0
    plain = Engine(StandinSettings(), parse_server_argv(EAGLE))
    assert plain.pass_figures(8)[1:] == (plain.accept_length, plain.interval_ms)  # no batching model: as before


def test_adaptive_runs_the_tiers_steps_for_the_batch(tmp_path):
    config = tmp_path / "tiers.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [1, 3]},
                                  "16": {"candidate_steps": [0]}}))
    args = parse_server_argv([*EAGLE, "--speculative-adaptive", "--speculative-adaptive-config", str(config)])
    engine = Engine(StandinSettings(), args)
    # each tier starts as SGLang's slot does: the starting steps (3) where a candidate, else the middle one
    assert [engine.steps_for_batch(b) for b in (1, 3, 4, 15, 16, 64)] == [2, 2, 3, 3, 0, 0]
    spec, accept, interval = engine.pass_figures(16)
    # 0 steps: a 1-token verify pass (1-node verify plus the draft extend, eagle_worker_v2.py:1469-1504), not a decode
    settings = StandinSettings()
    assert (spec, accept, interval) == (True, 1.0, settings.verify_ms * 1.25 / 1.75)
    assert interval != settings.decode_ms
    spec, accept, _ = engine.pass_figures(1)
    assert spec and accept == simulation.effective_accept_length(StandinSettings(), True, (2, 1, 3))


async def _last_chunk(engine: Engine, n: int):
    chunks = [c async for c in engine.generate("a prompt", n)]
    return chunks[-1]


def test_a_zero_step_pass_counts_as_a_verify_of_one_token(tmp_path):
    """SGLang 0.5.23 verifies a 1-node tree at 0 steps and commits it like any verify pass
    (eagle_worker_v2.py:1469-1472, batch_result_processor.py:829-832): spec_verify_ct counts it."""

    config = tmp_path / "tiers.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [0]}, "2": {"candidate_steps": [3]}}))
    args = parse_server_argv([*EAGLE, "--speculative-adaptive", "--speculative-adaptive-config", str(config)])
    settings = StandinSettings(ttft_ms=0, decode_ms=0, verify_ms=0)
    engine = Engine(settings, args)
    assert engine.adaptive_on and engine.steps_for_batch(1) == 0
    last = asyncio.run(_last_chunk(engine, 8))  # one request: batch 1, the 0-step tier
    assert (len(last.output_ids), last.spec_verify_ct) == (8, 8)  # accept length 1.0, not 8 tokens over 0 passes
    static = Engine(settings, parse_server_argv(EAGLE))
    last = asyncio.run(_last_chunk(static, 8))
    assert last.spec_verify_ct == simulation.expected_counts(8, static.accept_length, True)[1] < 8
