"""The correctness pass: one untimed greedy reply per prompt, with every token's log-probability and its top
alternatives, at each of a few concurrency levels. One record type (`Reply`) for it everywhere: measured
(bench/run/measure.py), kept in a bundle (bench/bundle/store.py) and a tune's journal, judged (bench/run/correctness.py)
and re-judged offline (`bench gate --bundle`).

A reply keeps the raw request the bench sent and the raw JSON body the server answered (bench/client/reply.py:
the record, how a body is kept and read).

Which levels (`levels`): 1 and the highest measured, so the gate sees a request alone and requests sharing a
forward (a defect of a batched kernel, a graph captured at another size); under eagle3-adaptive also one level
in each tier the measured levels reach, so every tier the server runs is compared. The reference adds a second
level when only 1 was measured (`NULL_LEVEL`): its replies at two batch sizes are the null the gate's limits come
from (bench/run/logprob_gate.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.client.logprob_rows import TokenLogprob
from bench.client.reply import Reply

NULL_LEVEL = 8  # the reference's second batch size when only concurrency 1 was measured
# SGLang 0.5.23's own adaptive tiers (srt/speculative/adaptive_spec_params.py:28-53, which
# profiles/spec/eagle3-adaptive.json writes out): the tiers a plan without a tuned record runs
DEFAULT_TIER_KEYS = (1, 8, 32, 64)
NO_ROWS = "the reply has no log-probabilities"


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
