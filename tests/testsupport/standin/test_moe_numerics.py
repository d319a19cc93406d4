"""testsupport/standin/numerics.py's MoE model (SIMULATED, invented figures): the decode depends on the batch it
runs in, so the reference against itself at another concurrency is a nonzero null; a correct reordering sits
near that null, a broken reduction well above it; `corrupt_min_batch` breaks only the positions decoded in a
large enough batch, also through the real HTTP stand-in at concurrency 8 against 1. The dense model (the
default) is as before: nothing depends on the batch.

The statistics are computed here (common-prefix mean, p99 and max |change| of the chosen token's
log-probability, and the gap at each first divergence), not by the kit's gate, which is being rewritten."""

from __future__ import annotations

import asyncio
import json
import math
from functools import cache
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bench.client import logprob_rows
from testsupport.net import free_port
from testsupport.standin import numerics, simulation
from testsupport.standin.engine import Engine
from testsupport.standin.server import build_app
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import StandinSettings, load_settings

VOCAB = len(simulation.VOCAB)
PROMPTS = tuple(f"moe prompt {i}" for i in range(64))
TOKENS = 128
TODAYS_MAX = 0.33  # nats: today's gate's largest common-prefix change (KIT_GATE_MAX_DELTA's default)


def decode(prompt: str, mode: str, batch, model: str = "moe", corrupt_min_batch: int | None = None,
           count: int = TOKENS) -> list[numerics.Position]:
    return numerics.decode(prompt, count, mode, lambda n: simulation.token_ids(prompt, n, False), VOCAB,
                           model=model, batch=batch, corrupt_min_batch=corrupt_min_batch)


@cache
def run(mode: str, batch: int, model: str = "moe", corrupt_min_batch: int | None = None,
        prompts: int = len(PROMPTS)) -> tuple:
    """The first `prompts` prompts' decodes, all positions at `batch` requests in flight."""
    return tuple(tuple(decode(p, mode, batch, model, corrupt_min_batch)) for p in PROMPTS[:prompts])


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def prefix_stats(reference, candidate, top_k: int = 5) -> dict:
    """Common prefix (positions before each prompt's first divergence): mean, p99 and max |change| of the
    chosen token's log-probability; the reference's gap at each first divergence (None: not in its top-k)."""
    deltas: list[float] = []
    gaps: list[float | None] = []
    for ref, cand in zip(reference, candidate, strict=True):
        for r, c in zip(ref, cand, strict=False):
            if r.token_id != c.token_id:
                top = dict(r.top[:top_k])
                gaps.append(r.logprob - top[c.token_id] if c.token_id in top else None)
                break
            deltas.append(abs(c.logprob - r.logprob))
    return {"tokens": len(deltas), "mean": sum(deltas) / len(deltas), "p99": quantile(deltas, 0.99),
            "max": max(deltas), "gaps": gaps, "exact": 1 - len(gaps) / len(reference)}


@cache
def null() -> dict:
    """The reference decoded at concurrency 1 against at 8: what a gate measures on the host."""
    return prefix_stats(run("reference", 1), run("reference", 8))


def test_the_reference_at_batch_1_is_the_dense_reference_and_batch_8_is_a_nonzero_null():
    assert run("reference", 1) == run("reference", 1, model="dense")  # batch 1: the exact reference
    assert [x.token_id for x in run("reference", 1)[0]] == simulation.token_ids(PROMPTS[0], TOKENS, False)
    s = null()
    assert s["tokens"] > 0.6 * len(PROMPTS) * TOKENS
    assert 0.004 < s["mean"] < 0.012 and 0.02 < s["p99"] < 0.045  # invented, shaped like the GPU's 0.031
    assert s["max"] > TODAYS_MAX  # a routing flip: today's gate would fail the reference against itself
    assert s["exact"] < 1 and all(g is not None for g in s["gaps"])  # texts part, at tokens in the top-k


def test_the_batch_is_padded_up_to_a_power_of_two():
    assert [numerics.batch_bucket(b) for b in (0, 1, 2, 3, 4, 5, 8, 9, 16, 17)] == [1, 1, 2, 4, 4, 8, 8, 16, 16, 32]
    p = PROMPTS[1]
    assert decode(p, "reference", 5) == decode(p, "reference", 8) != decode(p, "reference", 4)


def test_decoding_is_deterministic_and_follows_each_positions_batch():
    p = PROMPTS[2]
    assert decode(p, "reorder", 8) == decode(p, "reorder", 8)
    mixed = decode(p, "reorder", [1] * 64 + [8] * 64)
    assert mixed[:64] == decode(p, "reorder", 1)[:64] and mixed[64:] != decode(p, "reorder", 1)[64:]
    with pytest.raises(ValueError):
        decode(p, "reorder", [1] * 3)


@pytest.mark.parametrize("c", [1, 8])
def test_a_reordering_sits_near_the_null_at_the_same_batch(c):
    n, s = null(), prefix_stats(run("reference", c), run("reorder", c))
    mean_ratio, p99_ratio = s["mean"] / n["mean"], s["p99"] / n["p99"]
    print(f"null mean {n['mean']:.4f} p99 {n['p99']:.4f} max {n['max']:.3f}; reorder@{c} mean x{mean_ratio:.2f} "
          f"p99 x{p99_ratio:.2f} max {s['max']:.3f}")
    assert 0.8 <= mean_ratio <= 2.0 and 0.8 <= p99_ratio <= 2.0
    assert s["max"] > TODAYS_MAX  # a routing flip: a correct MoE profile fails today's gate
    gaps = s["gaps"]
    assert gaps and all(g is not None for g in gaps) and max(gaps) < 0.6  # tokens in the top-k; gaps as the GPU's
    assert sum(g < 0.05 for g in gaps) >= 0.8 * len(gaps)  # mostly near-ties; now and then a routing flip


@pytest.mark.parametrize("c", [1, 8])
def test_a_broken_reduction_is_well_above_the_null(c):
    n, s = null(), prefix_stats(run("reference", c), run("corrupt", c))
    print(f"corrupt@{c} mean x{s['mean'] / n['mean']:.2f} p99 x{s['p99'] / n['p99']:.2f} max {s['max']:.3f}")
    assert s["mean"] >= 3 * n["mean"] and s["p99"] >= 3 * n["p99"]
    assert sum(g is not None and g > 0.35 for g in s["gaps"]) >= 3  # flips that were no near-tie


def test_the_dense_model_is_unchanged_and_ignores_the_batch():
    for mode in ("reference", "reorder", "corrupt"):
        for p in PROMPTS[:8]:
            plain = numerics.decode(p, TOKENS, mode, lambda n, p=p: simulation.token_ids(p, n, False), VOCAB)
            assert all(decode(p, mode, b, model="dense") == plain for b in (1, 4, 8, 64))
    assert [x.token_id for x in decode(PROMPTS[0], "reference", 8, model="dense")] == \
        simulation.token_ids(PROMPTS[0], TOKENS, False)
    assert StandinSettings().numerics_model == "dense" and StandinSettings().corrupt_min_batch is None


@pytest.mark.parametrize("model", ["moe", "dense"])
@pytest.mark.parametrize("mode", ["reorder", "reference"])
def test_corrupt_min_batch_breaks_only_the_large_batches(model, mode):
    """At batch 1 and 4 the profile's own numerics, at 8 (and 5 to 7, padded to 8) corrupt ones: in the MoE
    model those are well above the null (test_a_broken_reduction_is_well_above_the_null)."""
    k = 8  # prompts
    for b in (1, 4):
        assert run(mode, b, model, 8, k) == run(mode, b, model, None, k)
    assert run(mode, 8, model, 8, k) == run(mode, 5, model, 8, k) == run("corrupt", 8, model, None, k)
    assert run(mode, 8, model, 16, k) == run(mode, 8, model, None, k) != run("corrupt", 8, model, None, k)


def test_settings_load_from_the_environment():
    s = load_settings({"STANDIN_NUMERICS_MODEL": "moe", "STANDIN_CORRUPT_MIN_BATCH": "8"})
    assert (s.numerics_model, s.corrupt_min_batch) == ("moe", 8)
    for bad in ({"STANDIN_NUMERICS_MODEL": "sparse"}, {"STANDIN_CORRUPT_MIN_BATCH": "0"}):
        with pytest.raises(Exception, match="invalid stand-in settings"):
            load_settings(bad)


# ----- through the HTTP stand-in -----------------------------------------------------------------
HTTP_TOKENS = 48


async def _serve_and_ask(settings: StandinSettings) -> tuple[list[dict], list[dict], dict]:
    """8 prompts at concurrency 8, then the same 8 one at a time; the replies, and /server_info after."""
    engine = Engine(settings, parse_server_argv(["--model-path", "m"]), environ={})
    runner = web.AppRunner(build_app(engine), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"

    async def ask(session: aiohttp.ClientSession, prompt: str) -> dict:
        body = {"text": prompt, "sampling_params": {"max_new_tokens": HTTP_TOKENS, "temperature": 0},
                "return_logprob": True, "top_logprobs_num": 5}
        async with session.post(f"{url}/generate", json=body) as resp:
            assert resp.status == 200
            return await resp.json()

    try:
        async with aiohttp.ClientSession() as session:
            together = await asyncio.gather(*(ask(session, p) for p in PROMPTS[:8]))
            alone = [await ask(session, p) for p in PROMPTS[:8]]
            async with session.get(f"{url}/server_info") as resp:
                info = await resp.json()
    finally:
        await runner.cleanup()
    return together, alone, info


def test_a_batch_8_only_fault_shows_at_concurrency_8_and_not_at_1():
    settings = StandinSettings(startup_delay_s=0, ttft_ms=150, decode_ms=2, numerics="reorder",
                               numerics_model="moe", corrupt_min_batch=8)
    together, alone, info = asyncio.run(_serve_and_ask(settings))
    assert info["standin"]["numerics_model"] == "moe" and info["standin"]["corrupt_min_batch"] == 8
    by_batch = info["standin"]["positions_by_batch"]
    print("positions by requests in flight:", by_batch)
    assert by_batch["1"] >= 8 * HTTP_TOKENS  # the ones sent one at a time (and a tail of the others)
    assert sum(n for b, n in by_batch.items() if numerics.batch_bucket(int(b)) == 8) >= 0.9 * 8 * HTTP_TOKENS

    def rows(reply: dict) -> list[tuple[int, float]]:
        return [(r.token_id, r.logprob) for r in logprob_rows.from_generate(reply)]

    def expected(prompt: str, mode: str, batch: int) -> list[tuple[int, float]]:
        return [(x.token_id, x.logprob) for x in decode(prompt, mode, batch, count=HTTP_TOKENS)]

    for prompt, reply in zip(PROMPTS[:8], alone, strict=True):
        assert rows(reply) == expected(prompt, "reorder", 1)  # batch 1: the profile's own, correct numerics
    half = HTTP_TOKENS // 2  # all 8 are in flight until the first one finishes
    for prompt, reply in zip(PROMPTS[:8], together, strict=True):
        assert rows(reply)[:half] == expected(prompt, "corrupt", 8)[:half]
    got = [[numerics.Position(t, lp, ((t, lp),)) for t, lp in rows(reply)] for reply in together]
    ref = [decode(p, "reference", 8, count=HTTP_TOKENS) for p in PROMPTS[:8]]
    assert prefix_stats(ref, got)["mean"] >= 3 * null()["mean"]  # against the reference at the same batch


def test_the_demo_config_loads():
    path = Path(__file__).resolve().parents[3] / "demo" / "standin.json"
    for profile in [None, *json.loads(path.read_text())["profiles"]]:
        env = {"STANDIN_CONFIG": str(path), **({"KIT_ACTIVE_PROFILE": profile} if profile else {})}
        load_settings(env)
