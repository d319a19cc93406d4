"""The stand-in's finished meta_info under speculation (SIMULATED: testsupport/standin/engine.py `Engine.meta_info`,
simulation.py `count_verify`): the correct-drafts histogram agrees with the chunks it sent, as SGLang 0.5.23's
`spec_correct_drafts_histogram` agrees with its verify passes."""

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
FAST = {"ttft_ms": 0, "decode_ms": 0, "verify_ms": 0}


async def _chunks(engine: Engine, n: int):
    return [c async for c in engine.generate("a prompt", n)]


def _final_meta(engine: Engine, n: int):
    chunks = asyncio.run(_chunks(engine, n))
    return chunks, engine.meta_info("rid", "a prompt", chunks[-1], n, 0.0)


@pytest.mark.parametrize("n, accept", [(64, 2.5), (65, 2.5), (16, 2.5), (7, 3.0), (1, 3.0), (9, 1.0)])
def test_the_histogram_counts_every_verify_and_its_correct_drafts(n, accept):
    engine = Engine(StandinSettings(accept_length=accept, **FAST), parse_server_argv(EAGLE))
    chunks, meta = _final_meta(engine, n)
    hist = meta["spec_correct_drafts_histogram"]
    assert len(hist) == 4  # bins 0 .. draft tokens - 1
    assert sum(hist) == meta["spec_verify_ct"] == len(chunks)
    weighted = sum(k * c for k, c in enumerate(hist))
    assert weighted == meta["completion_tokens"] - meta["spec_verify_ct"] == meta["spec_num_correct_drafts"]
    counts = simulation.chunk_token_counts(n, accept, True)
    assert hist == simulation.correct_drafts_histogram(counts, 4)
    assert meta["spec_accept_rate"] == weighted / meta["spec_num_proposed_drafts"]


def test_the_last_chunk_cut_short_counts_what_it_carried():
    # 16 tokens at 2.5: 2, 3, 2, 3, 2, 3 then the 16th alone: a verify with 0 correct drafts
    assert simulation.chunk_token_counts(16, 2.5, True) == [2, 3, 2, 3, 2, 3, 1]
    assert simulation.correct_drafts_histogram([2, 3, 2, 3, 2, 3, 1], 4) == [1, 3, 3, 0]


def test_count_verify_grows_for_a_longer_chain_and_skips_nothing():
    hist = [0, 0]
    simulation.count_verify(hist, 4)
    simulation.count_verify(hist, 1)
    assert hist == [1, 0, 0, 1]
    assert simulation.correct_drafts_histogram([0, 2], 3) == [0, 1, 0]  # a chunk of no tokens is no verify


def test_no_histogram_without_speculation_nor_before_the_end():
    off = Engine(StandinSettings(**FAST), parse_server_argv(["--model-path", "/m"]))
    _, meta = _final_meta(off, 5)
    assert not any(k.startswith("spec_") for k in meta)
    spec = Engine(StandinSettings(accept_length=2.0, **FAST), parse_server_argv(EAGLE))
    chunks = asyncio.run(_chunks(spec, 6))
    assert "spec_correct_drafts_histogram" not in spec.meta_info("rid", "a prompt", chunks[0], 6, 0.0)


def test_zero_step_passes_land_in_bin_zero(tmp_path):
    config = tmp_path / "tiers.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [0]}, "2": {"candidate_steps": [3]}}))
    args = parse_server_argv([*EAGLE, "--speculative-adaptive", "--speculative-adaptive-config", str(config)])
    _, meta = _final_meta(Engine(StandinSettings(**FAST), args), 8)
    assert meta["spec_correct_drafts_histogram"] == [8, 0, 0, 0] and meta["spec_num_correct_drafts"] == 0


def test_queue_time_only_with_enable_metrics_and_it_counts_the_wait_for_a_slot():
    plain = Engine(StandinSettings(**FAST), parse_server_argv(["--model-path", "/m"]))
    assert "queue_time" not in _final_meta(plain, 4)[1]

    async def two_at_once(engine: Engine):
        async def one():
            return [c async for c in engine.generate("a prompt", 8)]
        return await asyncio.gather(one(), one())

    settings = StandinSettings(**{**FAST, "decode_ms": 20})
    engine = Engine(settings, parse_server_argv(["--model-path", "/m", "--enable-metrics", "--max-running-requests", "1"]))
    first, second = asyncio.run(two_at_once(engine))
    waits = sorted(engine.meta_info("r", "a prompt", c[-1], 8, 0.0)["queue_time"] for c in (first, second))
    assert waits[0] < 0.01  # the first ran at once
    assert waits[1] >= 7 * 0.02 * 0.9  # the second waited for the first's 8 tokens (7 passes after the first)


def test_the_config_caps_running_requests_as_the_plans_flag_would_and_the_flag_wins():
    off = ["--model-path", "/m"]
    engine = Engine(StandinSettings(max_running_requests=3, **FAST), parse_server_argv(off))
    assert engine.args.running_cap == 3 and engine.args.resolved_max_running_requests == 3
    flagged = Engine(StandinSettings(max_running_requests=3, **FAST),
                     parse_server_argv([*off, "--max-running-requests", "5"]))
    assert flagged.args.running_cap == 5
    assert Engine(StandinSettings(**FAST), parse_server_argv(EAGLE)).args.running_cap == 48

    async def most_at_once() -> int:
        seen = 0

        async def one() -> None:
            nonlocal seen
            async for _ in engine.generate("a prompt", 3):
                seen = max(seen, engine.stats.running)

        await asyncio.gather(*(one() for _ in range(8)))
        return seen

    assert asyncio.run(most_at_once()) == 3
