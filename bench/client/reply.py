"""One reply of a correctness pass (`Reply`): one untimed greedy reply per prompt at one concurrency level,
with every token's log-probability and its top alternatives. The one record type for it everywhere: the server
client makes it (bench/client/server_client.py), a bundle keeps it (bench/bundle/store.py) and a tune's journal,
the gate judges it (bench/run/correctness.py, bench/run/passes.py for the pass's levels).

A reply keeps the raw request the bench sent and the raw JSON body the server answered, so a bundle can be
re-judged from what the server said, not from what the kit made of it; `logprobs` is parsed from that body by
bench/client/logprob_rows.py, and `problem` says why there are none when the body has them malformed. The body is
kept as a bundle file can hold it (`storable`): numbers JSON does not allow (NaN, Infinity) and integers of 19
digits or more, which bundle files refuse (bench/bundle/schema.py), are kept as strings, so the reply reads back
the same (no evidence either way); a body nested deeper than MAX_DEPTH is not kept at all (the cell is invalid).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from bench.client import logprob_rows
from bench.client.logprob_rows import TokenLogprob

# How deep a kept reply may nest: SGLang's /generate reply with log-probabilities nests 5 deep (the body, meta_info,
# output_top_logprobs, a position, a row); far deeper and reading it back could reach Python's recursion limit.
MAX_DEPTH = 32
BIG_INT = 10**18  # integers from here on are refused in bundle files (bench/bundle/schema.py: 19 digits or more)


class ReplyJson(TypedDict, total=False):
    """A reply as a bundle's or a journal's line keeps it (`Reply.to_json`): the raw request and response where the
    reply has them, else the parsed rows and any problem."""

    prompt_id: str
    concurrency: int
    text: str
    request: Mapping[str, object] | None
    response: Any
    logprobs: list[list[Any]] | None
    problem: str


@dataclass(frozen=True)
class Reply:
    """One greedy reply of a correctness pass at one concurrency level."""

    prompt_id: str
    concurrency: int
    text: str
    logprobs: list[TokenLogprob] | None  # None: the server sent none, or sent them malformed (`problem`)
    request: Mapping[str, object] | None = None  # {"path": ..., "body": ...} as sent, kept as it is
    response: Any = None  # the reply's JSON body as received (`storable`)
    problem: str | None = None  # why `logprobs` is None though the reply has them: the malformed field, named

    def to_json(self) -> ReplyJson:
        out: ReplyJson = {"prompt_id": self.prompt_id, "concurrency": self.concurrency, "text": self.text}
        if self.response is not None:  # the parsed rows (and any problem) follow from it
            out.update(request=self.request, response=self.response)
        else:
            out["logprobs"] = logprob_rows.to_json(self.logprobs)
            if self.problem:
                out["problem"] = self.problem
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object], api: str = "generate") -> Reply | None:
        """What `to_json` wrote (and rows of older bundles: no concurrency, parsed rows only); None for
        anything else. The log-probabilities are parsed again from a kept response."""
        pid = data.get("prompt_id")
        if not isinstance(pid, str):
            return None
        level = data.get("concurrency", 1)
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            return None
        response = data.get("response")
        problem = data.get("problem") if isinstance(data.get("problem"), str) else None
        if response is not None:
            rows, problem = read(response, api)
        else:
            stored = data.get("logprobs")
            rows = logprob_rows.from_json(stored)
            if rows is None and stored not in (None, []):  # the kit writes only well-formed rows: this file was damaged
                return None
        request = data.get("request") if isinstance(data.get("request"), dict) else None
        text = data.get("text")
        return cls(pid, level, text if isinstance(text, str) else "", rows, request, response,
                   problem if rows is None else None)


def read(body: Any, api: str) -> tuple[list[TokenLogprob] | None, str | None]:
    """The log-probabilities of a raw reply body of `api` ("generate" or "chat"), or None and why: None without a
    reason where it has none, with one naming the field where they are malformed. Never raises."""
    return logprob_rows.read_generate(body) if api == "generate" else logprob_rows.read_chat(body)


def parse(body: Any, api: str) -> list[TokenLogprob] | None:
    """The log-probabilities of a raw reply body of `api`; None where it has none or they are malformed."""
    return read(body, api)[0]


def storable(body: Any) -> Any:
    """A decoded reply body (changed in place) as a bundle file can keep it and read back: NaN and the infinities as
    the strings "NaN", "Infinity", "-Infinity", integers of 19 digits or more as their digits (strings prove
    nothing: the reply reads back as it was judged). ValueError when it nests deeper than MAX_DEPTH. Iterative:
    a hostile depth never reaches the recursion limit."""
    root = [body]
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
        for k in range(len(node)) if isinstance(node, list) else list(node):
            v = node[k]
            if isinstance(v, float) and not math.isfinite(v):
                node[k] = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
            elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= BIG_INT:
                node[k] = str(v)
            elif isinstance(v, list | dict):
                stack.append((v, depth + 1))
    return root[0]


def text_of(body: Any, api: str) -> str:
    """The generated text of a raw reply body."""
    if not isinstance(body, Mapping):
        return ""
    if api == "generate":
        return str(body.get("text") or "")
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = first.get("message")
    return str((message.get("content") if isinstance(message, Mapping) else None) or "")
