"""bench/run/passes.py: the correctness pass's levels and its one record type, raw replies kept."""

from __future__ import annotations

import pytest

from bench.bundle import store as bundle
from bench.client import reply as replies
from bench.run import passes
from bench.run.logprob_gate import TokenLogprob
from bench.run.passes import Reply
from launcher.errors import UserError

GENERATE_BODY = {"text": "ab", "meta_info": {"output_token_logprobs": [[-0.1, 7, None], [-0.2, 8, None]],
                                             "output_top_logprobs": [[[-0.1, 7, None], [-2.0, 9, None]],
                                                                     [[-0.2, 8, None], [-1.9, 9, None]]]}}


def test_levels_are_one_and_the_highest_and_one_in_each_adaptive_tier_reached():
    assert passes.levels([1]) == [1]
    assert passes.levels([1, 4, 16]) == [1, 16]
    assert passes.levels([4, 16]) == [1, 16]
    # SGLang's tiers 1, 8, 32, 64: levels 1 and 4 reach tier 1, 16 tier 8, 48 tier 32; 64 is not reached
    assert passes.levels([1, 4, 16, 48], passes.DEFAULT_TIER_KEYS) == [1, 16, 48]
    assert passes.levels([1, 10, 12, 40], (1, 8, 32)) == [1, 10, 40]


def test_the_reference_adds_a_second_batch_for_the_null_and_every_level_under_adaptive_tiers():
    assert passes.reference_levels([1]) == [1, passes.NULL_LEVEL]
    assert passes.reference_levels([1, 4]) == [1, 4]
    assert passes.reference_levels([1, 2, 4], (1, 2, 4)) == [1, 2, 4]


def test_a_level_above_the_prompts_is_filled_with_copies_and_one_reply_per_prompt_is_kept(monkeypatch):
    """One prompt at level 8: 8 requests in flight (a real batch of 8 for the null), one reply kept."""
    import asyncio

    from bench.client.server_client import ServerClient
    from bench.client.workload import build_workload

    seen: list[tuple[str, int]] = []
    in_flight, most = 0, 0

    async def fake(self, prompt, top_k, concurrency=1):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        seen.append((prompt.id, concurrency))
        return Reply(prompt.id, concurrency, "t", [])

    prompts = build_workload("chat", 1)
    monkeypatch.setattr(ServerClient, "logprobs", fake)
    replies = asyncio.run(ServerClient.__new__(ServerClient).logprob_pass(prompts, 5, 8))
    assert len(seen) == 8 and most == 8 and [r.prompt_id for r in replies] == [prompts[0].id]


def test_tier_keys_are_the_tuned_records_or_sglangs_defaults_under_adaptive_only():
    assert passes.tier_keys_of("eagle3", None) is None
    assert passes.tier_keys_of("eagle3-adaptive", None) == passes.DEFAULT_TIER_KEYS
    assert passes.tier_keys_of("eagle3-adaptive", {"4": [1], "1": [3]}) == (1, 4)


def test_a_reply_keeps_the_raw_exchange_and_is_read_back_from_it(tmp_path):
    rows = replies.parse(GENERATE_BODY, "generate")
    assert rows == [TokenLogprob(7, -0.1, {7: -0.1, 9: -2.0}), TokenLogprob(8, -0.2, {8: -0.2, 9: -1.9})]
    reply = Reply("p0", 4, "ab", rows, {"path": "/generate", "body": {"text": "q"}}, GENERATE_BODY)
    on_disk = reply.to_json()
    assert on_disk["response"] == GENERATE_BODY and "logprobs" not in on_disk  # the rows follow from the body
    bundle.write_logprobs(tmp_path, "fused", "eagle3", [reply])
    assert bundle.read_logprobs(tmp_path, "fused", "eagle3") == [reply]


def test_an_older_row_without_a_level_or_raw_body_still_reads_and_junk_does_not():
    old = {"prompt_id": "p0", "text": "ab", "logprobs": [[7, -0.1, [[7, -0.1]]]]}
    back = Reply.from_json(old)
    assert back is not None and back.concurrency == 1 and back.logprobs == [TokenLogprob(7, -0.1, {7: -0.1})]
    for junk in ({"text": "x"}, {"prompt_id": "p", "concurrency": 0}, {"prompt_id": "p", "concurrency": True}):
        assert Reply.from_json(junk) is None
    odd = {**GENERATE_BODY, "meta_info": {**GENERATE_BODY["meta_info"], "output_top_logprobs": [5, 5]}}
    # a malformed alternatives list is no traceback, and no evidence: with no alternatives every flip would read
    # as a token outside the top-k
    assert replies.read(odd, "generate") == (None, "meta_info.output_top_logprobs[0] is 5, not a list")


def test_by_level_and_texts():
    a1, a8 = Reply("a", 1, "x", []), Reply("a", 8, "y", None)
    assert passes.by_level([a1, a8]) == {1: {"a": []}, 8: {"a": None}}
    assert passes.texts([a8, a1]) == {"a": "x"}
    assert passes.texts([]) == {}


def test_a_kept_body_reads_back_from_a_bundle_as_it_was_judged(tmp_path):
    """NaN, the infinities and integers of 19 digits or more (which bundle files refuse) are kept as strings, so
    the bundle reads back, with the same verdict: no evidence, the field named."""
    body = replies.storable({"text": "ab", "meta_info": {"output_token_logprobs": [[float("nan"), 7, None],
                                                                                  [-0.2, 10**30, None]],
                                                        "e2e_latency": float("inf"), "x": [float("-inf"), True, 3]}})
    assert body["meta_info"]["e2e_latency"] == "Infinity" and body["meta_info"]["x"] == ["-Infinity", True, 3]
    assert body["meta_info"]["output_token_logprobs"][1][1] == str(10**30)
    rows, problem = replies.read(body, "generate")
    assert rows is None and problem == "meta_info.output_token_logprobs[0][0] is 'NaN', not a log-probability (a number)"
    reply = Reply("p0", 1, "ab", rows, {"path": "/generate", "body": {}}, body, problem)
    bundle.write_logprobs(tmp_path, "fused", "off", [reply])
    assert bundle.read_logprobs(tmp_path, "fused", "off") == [reply]


def test_a_body_nested_past_max_depth_is_refused_without_recursion():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match=f"nested more than {replies.MAX_DEPTH} levels deep"):
        replies.storable({"meta_info": deep})
    ok: list = [-0.1]
    for _ in range(replies.MAX_DEPTH - 1):
        ok = [ok]
    assert replies.storable(ok) is ok


def test_damaged_stored_rows_are_a_damaged_file_naming_its_line(tmp_path):
    bundle.write_logprobs(tmp_path, "fused", "off", [Reply("p0", 1, "ab", [TokenLogprob(7, -0.1, {})])])
    path = tmp_path / "fused__off.logprobs.jsonl"
    good = path.read_text()
    path.write_text(good + good.replace("-0.1", "5.0"))  # a log-probability above 0 the kit never wrote
    with pytest.raises(UserError, match=r"fused__off.logprobs.jsonl line 2: not a correctness-pass row"):
        bundle.read_logprobs(tmp_path, "fused", "off")
