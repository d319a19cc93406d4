"""The stand-in's log-probabilities in SGLang 0.5.23's shapes (see docs/evidence.md "Log-probabilities").

- /generate with ``return_logprob``: ``meta_info.output_token_logprobs`` is one ``[logprob, token_id, text]``
  row per generated token (text None unless ``return_text_in_logprobs``), cumulative in every streamed
  chunk; with ``top_logprobs_num`` > 0 ``meta_info.output_top_logprobs`` holds one list of such rows per
  position (managers/tokenizer_manager.py ``add_logprob_to_meta_info``, ``detokenize_logprob_tokens``).
- /v1/chat/completions with ``logprobs``: ``choices[0].logprobs.content`` is one
  ``{token, bytes, logprob, top_logprobs: [{token, bytes, logprob}]}`` per token (entrypoints/openai/
  protocol.py ``ChatCompletionTokenLogprob``), the new tokens of each chunk when streamed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from testsupport.standin import simulation
from testsupport.standin.numerics import TOP_N, Position

MAX_TOP = 20  # the OpenAI API's bound on top_logprobs


def _count(value: object, name: str, high: int) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise web.HTTPBadRequest(text=f"{name} must be an integer from 0 to {high}")
    return value


def generate_request(body: Mapping[str, Any]) -> tuple[bool, int, bool]:
    """(return_logprob, top_logprobs_num, return_text_in_logprobs) of a /generate body; 400 when malformed."""
    want = body.get("return_logprob", False)
    if not isinstance(want, bool):
        raise web.HTTPBadRequest(text="return_logprob must be true or false")
    return want, min(_count(body.get("top_logprobs_num"), "top_logprobs_num", MAX_TOP), TOP_N), bool(
        body.get("return_text_in_logprobs"))


def chat_request(body: Mapping[str, Any]) -> tuple[bool, int]:
    """(logprobs, top_logprobs) of a chat body; 400 when malformed or top_logprobs comes without logprobs."""
    want = body.get("logprobs", False)
    if not isinstance(want, bool):
        raise web.HTTPBadRequest(text="logprobs must be true or false")
    top = _count(body.get("top_logprobs"), "top_logprobs", MAX_TOP)
    if top and not want:
        raise web.HTTPBadRequest(text="top_logprobs needs logprobs: true")
    return want, min(top, TOP_N)


def _text(token_id: int) -> str:
    return " " + simulation.VOCAB[token_id]


def generate_meta(positions: Sequence[Position], top: int, with_text: bool) -> dict[str, Any]:
    """The meta_info keys a /generate reply with return_logprob carries."""
    def row(lp: float, tid: int) -> list[Any]:
        return [lp, tid, _text(tid) if with_text else None]

    meta: dict[str, Any] = {
        "input_token_logprobs": [],
        "output_token_logprobs": [row(p.logprob, p.token_id) for p in positions],
        "output_token_logprobs_length": len(positions),
    }
    if top > 0:
        meta["input_top_logprobs"] = []
        meta["output_top_logprobs"] = [[row(lp, tid) for tid, lp in p.top[:top]] for p in positions]
    return meta


def chat_content(positions: Sequence[Position], top: int) -> dict[str, Any]:
    """A chat choice's ``logprobs`` object for these tokens."""
    def entry(tid: int, lp: float) -> dict[str, Any]:
        text = _text(tid)
        return {"token": text, "bytes": list(text.encode()), "logprob": lp}

    return {"content": [{**entry(p.token_id, p.logprob), "top_logprobs": [entry(t, lp) for t, lp in p.top[:top]]}
                        for p in positions]}
