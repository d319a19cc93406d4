"""The stand-in (testsupport/standin) against real SGLang 0.5.23: the same requests to both, streamed and
not, /generate and /v1/chat/completions; keys, JSON types and SSE framing compared.

Where they differ the difference is named here with its reason, and the test fails on any other: a key
the stand-in sends that the real server does not (kit code tested on the stand-in would read what never
comes), a key the real server sends that is not listed, or a type that disagrees."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from testsupport.stack import KitStack

GENERATE = {"text": "Hello world", "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}
CHAT = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}
STREAM_OPTIONS = {"stream": True, "stream_options": {"include_usage": True}}

# Keys the real server sends and the stand-in leaves out: request timing and bookkeeping the stand-in does not
# model (sglang/srt/managers/tokenizer_manager.py fills them per request). `queue_time` is not among them: the
# stand-in sends it too under --enable-metrics, its wait for a running slot (the open-loop bench reads it).
REAL_TIMING = {"api_server_dispatch_finish_ts", "decode_throughput", "first_token_latency", "forward_entry_time",
               "prefill_finished_time", "request_finished_ts", "request_received_ts",
               "response_sent_to_client_ts", "storage_prefetch_wait", "storage_staging_wait"}
REAL_BOOKKEEPING = {"cached_tokens_details", "dp_rank", "num_retractions", "weight_versions"}
REAL_ONLY = {
    "generate": {f"meta_info.{k}" for k in REAL_TIMING | REAL_BOOKKEEPING},
    "generate_stream": {f"meta_info.{k}" for k in REAL_TIMING | REAL_BOOKKEEPING},
    # OpenAI-compatible extras of SGLang's protocol (sglang/srt/entrypoints/openai/protocol.py).
    "chat": {"choices[].message.reasoning_content", "choices[].matched_stop", "metadata",
             "usage.prompt_tokens_details", "usage.reasoning_tokens", "usage.completion_tokens_details"},
    "chat_stream": {"choices[].delta.reasoning_content", "choices[].matched_stop",
                    "usage.prompt_tokens_details", "usage.reasoning_tokens", "usage.completion_tokens_details"},
}
# Keys the stand-in sends that the real server does not, on purpose.
STANDIN_ONLY = {
    # spec_verify_ct and the other spec_* keys: both send them only in the finished chunk under speculation
    # (sglang/srt/managers/tokenizer_manager.py:3150-3172), so neither sends them here (no speculation on CPU)
    "generate": set(),
    "generate_stream": set(),
    # SGLang drops a None tool_calls from the message (sglang/srt/entrypoints/openai/protocol.py:1302-1303);
    # the stand-in writes null.
    "chat": {"choices[].message.tool_calls"},
    "chat_stream": set(),
}


def shape(value, path: str = "", out: dict | None = None) -> dict[str, set[str]]:
    """Path -> the JSON types seen there (lists as `[]`, every element merged)."""
    out = {} if out is None else out
    kind = type(value).__name__ if value is not None else "null"
    out.setdefault(path or "$", set()).add({"int": "number", "float": "number"}.get(kind, kind))
    if isinstance(value, dict):
        for k, v in value.items():
            shape(v, f"{path}.{k}" if path else k, out)
    elif isinstance(value, list):
        for v in value:
            shape(v, f"{path}[]", out)
    return out


def merged(payloads: list) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in payloads:
        shape(p, "", out)
    return out


def compare(real: dict[str, set[str]], standin: dict[str, set[str]]) -> tuple[set[str], set[str], dict]:
    """(real-only paths, stand-in-only paths, common paths whose non-null types disagree); a path under a
    one-sided one is not listed again."""
    def roots(only: set[str]) -> set[str]:
        return {p for p in only if not any(p.startswith(q + ".") or p.startswith(q + "[]") for q in only if q != p)}

    real_only, standin_only = roots(set(real) - set(standin)), roots(set(standin) - set(real))
    clash = {}
    for p in set(real) & set(standin):
        a, b = real[p] - {"null"}, standin[p] - {"null"}
        if a and b and not (a & b):
            clash[p] = (sorted(real[p]), sorted(standin[p]))
    return real_only, standin_only, clash


def sse(resp: httpx.Response) -> list:
    """The events of an SSE body, checked for the framing both servers must share: `data: ` lines each
    followed by a blank line, nothing else, ending in `data: [DONE]`."""
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
    body = resp.text
    assert body.endswith("data: [DONE]\n\n"), body[-200:]
    events = body.split("\n\n")
    assert events[-1] == ""
    payloads = []
    for ev in events[:-2]:
        assert ev.startswith("data: ") and "\n" not in ev, repr(ev[:200])
        payloads.append(json.loads(ev[len("data: "):]))
    assert events[-2] == "data: [DONE]"
    return payloads


def exchange(base: str) -> dict:
    """The four answers of one server."""
    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(f"{base}{path}", json=body, timeout=120)

    gen = post("/generate", GENERATE)
    chat = post("/v1/chat/completions", CHAT)
    assert gen.status_code == 200 and chat.status_code == 200, (gen.text, chat.text)
    return {
        "generate": [gen.json()],
        "generate_stream": sse(post("/generate", {**GENERATE, "stream": True})),
        "chat": [chat.json()],
        "chat_stream": sse(post("/v1/chat/completions", {**CHAT, **STREAM_OPTIONS})),
    }


@pytest.fixture(scope="module")
def answers(serving_stack, tmp_path_factory) -> dict:
    standin = KitStack(Path(tmp_path_factory.mktemp("standin")), "baseline", "off")
    try:
        standin.start(120)
        return {"real": exchange(serving_stack.server_url), "standin": exchange(standin.server_url)}
    finally:
        standin.stop()


@pytest.mark.parametrize("kind", ["generate", "generate_stream", "chat", "chat_stream"])
def test_keys_and_types_match_but_for_the_named_differences(answers, kind):
    real_only, standin_only, clash = compare(merged(answers["real"][kind]), merged(answers["standin"][kind]))
    assert standin_only == STANDIN_ONLY[kind], f"stand-in-only keys changed: {sorted(standin_only)}"
    assert real_only == REAL_ONLY[kind], f"real-only keys changed: {sorted(real_only)}"
    assert not clash, f"types disagree: {clash}"


@pytest.mark.parametrize("side", ["real", "standin"])
def test_generate_streams_cumulative_output(answers, side):
    """At most one event per token: SGLang sends one per token while the reader keeps up, and when
    chunks queue up behind a slow reader it sends only the newest cumulative one
    (`tokenizer_manager.py:1976-1993`). The stand-in never lags, so it sends exactly one per token."""
    chunks = answers[side]["generate_stream"]
    tokens = GENERATE["sampling_params"]["max_new_tokens"]
    assert 1 <= len(chunks) <= tokens
    if side == "standin":
        assert len(chunks) == tokens
    for prev, cur in zip(chunks, chunks[1:], strict=False):
        assert len(cur["output_ids"]) > len(prev["output_ids"])  # every event brings a token
        assert cur["output_ids"][: len(prev["output_ids"])] == prev["output_ids"]  # cumulative ids
        assert cur["text"].startswith(prev["text"])  # cumulative text
    assert len(chunks[-1]["output_ids"]) == tokens
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert "e2e_latency" in chunks[-1]["meta_info"]
    assert not any("e2e_latency" in c["meta_info"] for c in chunks[:-1])
    assert chunks[-1]["text"] == answers[side]["generate"][0]["text"]  # greedy: the same text unstreamed


@pytest.mark.parametrize("side", ["real", "standin"])
def test_chat_stream_opens_with_the_role_and_closes_with_usage(answers, side):
    chunks = answers[side]["chat_stream"]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and chunks[0]["choices"][0]["delta"]["content"] == ""
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}


def test_the_chat_stream_is_framed_alike(answers):
    """Both send the finish reason in a chunk of its own with no token (serving_chat.py around 2641-2662), and
    `usage` only on the last chunk (the stand-in used to carry the finish on its last token and write
    `"usage": null` on every chunk)."""
    for side in ("real", "standin"):
        chunks = answers[side]["chat_stream"]
        assert "content" not in chunks[-2]["choices"][0]["delta"], side  # the finish chunk carries no token
        assert chunks[-2]["choices"][0]["finish_reason"] == "length", side
        assert "content" in chunks[-3]["choices"][0]["delta"], side  # the last token, without the finish
        assert all("usage" not in c for c in chunks[:-1]), side
