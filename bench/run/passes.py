"""The correctness pass: one untimed greedy reply per prompt, with every token's log-probability and its top
alternatives, at each of a few concurrency levels. One record type (`Reply`) for it everywhere: measured
(bench/run/measure.py), kept in a bundle (bench/bundle/store.py) and a tune's journal, judged (bench/run/correctness.py)
and re-judged offline (`bench gate --bundle`).

A reply keeps the raw request the bench sent and the raw JSON body the server answered, so a bundle can be
re-judged from what the server said, not from what the kit made of it; `logprobs` is parsed from that body by
bench/gate/logprob_rows.py, and `problem` says why there are none when the body has them malformed. The body is kept
as a bundle file can hold it (`storable`): numbers JSON does not allow (NaN, Infinity) and integers of 19 digits
or more, which bundle files refuse (bench/bundle/schema.py), are kept as strings, so the reply reads back the
same (no evidence either way); a body nested deeper than MAX_DEPTH is not kept at all (the cell is invalid).

Which levels (`levels`): 1 and the highest measured, so the gate sees a request alone and requests sharing a
forward (a defect of a batched kernel, a graph captured at another size); under eagle3-adaptive also one level
in each tier the measured levels reach, so every tier the server runs is compared. The reference adds a second
level when only 1 was measured (`NULL_LEVEL`): its replies at two batch sizes are the null the gate's limits come
from (bench/run/logprob_gate.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.gate import logprob_rows
from bench.run.logprob_gate import TokenLogprob

NULL_LEVEL = 8  # the reference's second batch size when only concurrency 1 was measured
# SGLang 0.5.23's own adaptive tiers (srt/speculative/adaptive_spec_params.py:28-53, which
# profiles/spec/eagle3-adaptive.json writes out): the tiers a plan without a tuned record runs
DEFAULT_TIER_KEYS = (1, 8, 32, 64)
# How deep a kept reply may nest: SGLang's /generate reply with log-probabilities nests 5 deep (the body, meta_info,
# output_top_logprobs, a position, a row); far deeper and reading it back could reach Python's recursion limit.
MAX_DEPTH = 32
BIG_INT = 10**18  # integers from here on are refused in bundle files (bench/bundle/schema.py: 19 digits or more)
NO_ROWS = "the reply has no log-probabilities"


@dataclass(frozen=True)
class Reply:
    """One greedy reply of a correctness pass at one concurrency level."""

    prompt_id: str
    concurrency: int
    text: str
    logprobs: list[TokenLogprob] | None  # None: the server sent none, or sent them malformed (`problem`)
    request: dict[str, Any] | None = None  # {"path": ..., "body": ...} as sent
    response: Any = None  # the reply's JSON body as received (`storable`)
    problem: str | None = None  # why `logprobs` is None though the reply has them: the malformed field, named

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_id": self.prompt_id, "concurrency": self.concurrency, "text": self.text}
        if self.response is not None:  # the parsed rows (and any problem) follow from it
            out.update(request=self.request, response=self.response)
        else:
            out["logprobs"] = logprob_rows.to_json(self.logprobs)
            if self.problem:
                out["problem"] = self.problem
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], api: str = "generate") -> Reply | None:
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


def by_level(replies: Iterable[Reply]) -> dict[int, dict[str, list[TokenLogprob] | None]]:
    """concurrency -> prompt id -> log-probabilities, the first reply of a prompt at a level winning."""
    out: dict[int, dict[str, list[TokenLogprob] | None]] = {}
    for r in replies:
        out.setdefault(r.concurrency, {}).setdefault(r.prompt_id, r.logprobs)
    return out


def problems_by_level(replies: Iterable[Reply]) -> dict[int, dict[str, str]]:
    """concurrency -> prompt id -> why the prompt has no usable log-probabilities there (the reply `by_level`
    keeps: the first of a prompt at a level); prompts with rows are left out."""
    out: dict[int, dict[str, str]] = {}
    seen: set[tuple[int, str]] = set()
    for r in replies:
        if (r.concurrency, r.prompt_id) in seen:
            continue
        seen.add((r.concurrency, r.prompt_id))
        if not r.logprobs:
            out.setdefault(r.concurrency, {})[r.prompt_id] = r.problem or NO_ROWS
    return out


def texts(replies: Iterable[Reply]) -> dict[str, str]:
    """prompt id -> text at the lowest level (the texts compared for information)."""
    replies = list(replies)
    if not replies:
        return {}
    low = min(r.concurrency for r in replies)
    out: dict[str, str] = {}
    for r in replies:
        if r.concurrency == low:
            out.setdefault(r.prompt_id, r.text)
    return out


def levels(concurrency: Sequence[int], tier_keys: Iterable[int] | None = None) -> list[int]:
    """The levels a correctness pass runs at: 1, the highest measured, and under adaptive tiers (their batch
    keys) the lowest measured level in each tier the measured levels reach (SGLang serves a batch from the
    largest tier at or below its size, the lowest tier when none is)."""
    top = max(concurrency)
    out = {1, top}
    keys = sorted(set(tier_keys or ()))
    if keys:
        reached: dict[int, int] = {}
        for c in sorted(set(concurrency)):
            tier = max((k for k in keys if k <= c), default=keys[0])
            reached.setdefault(tier, c)
        out |= set(reached.values())
    return sorted(out)


def reference_levels(concurrency: Sequence[int], tier_keys: Iterable[int] | None = None) -> list[int]:
    """The reference's levels: a candidate's (`levels` with the same tiers), every measured level under
    adaptive tiers (a tuned plan's tiers are keyed at measured levels), and a second batch size where only 1
    was measured, so that the null can be measured (with fewer prompts than that, ServerClient.logprob_pass
    sends them again until the batch is full)."""
    out = set(levels(concurrency, tier_keys))
    if tier_keys is not None:
        out |= set(concurrency)
    if out == {1}:
        out.add(NULL_LEVEL)
    return sorted(out)


def tier_keys_of(spec: str, adaptive_tiers: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    """The tier keys a cell runs under: its tuned record's, SGLang's defaults under eagle3-adaptive without one,
    None under any other spec mode."""
    from launcher.profiles.adaptive_tiers import SPEC_MODE

    if spec != SPEC_MODE:
        return None
    if adaptive_tiers:
        return tuple(sorted(int(k) for k in adaptive_tiers))
    return DEFAULT_TIER_KEYS
