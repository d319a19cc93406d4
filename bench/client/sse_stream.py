"""Reading one streamed SGLang response: SSE events as bytes arrive, timed per chunk, within the caps.

The per-chunk hot path of the bench's client (server_client.ServerClient.request): it must stay far
below the server's chunk interval. What each event means: sse_events.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp

from bench.client.capped_body import DRAIN_CAP, DRAIN_TIMEOUT_S, size_text
from bench.client.sse_events import COMPLETION_AT, FINISH_NULL_AT, StreamLimit, StreamState, decode


async def drain(resp: aiohttp.ClientResponse, state: StreamState) -> None:
    """Read what follows [DONE] so the connection is reused; past DRAIN_CAP bytes or DRAIN_TIMEOUT_S
    the connection is dropped instead."""
    state.closing = True
    left = DRAIN_CAP
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            while left > 0:
                data = await resp.content.read(left)
                if not data:
                    return
                left -= len(data)
    resp.close()


def _joined(buf: bytearray, data: bytes, cap: int) -> bytes | None:
    """`data` after the partial event waiting in `buf`: the bytes to split into events (`buf` emptied), or None
    while no event is complete yet (`buf` keeps them). Only the new bytes are searched for the separator."""
    if not buf:
        return data
    seek = len(buf) - 1  # a separator may straddle the old end
    buf += data
    if buf.find(b"\n\n", seek) < 0:
        if len(buf) > cap:
            raise StreamLimit(f"an SSE event longer than the {size_text(cap)} line cap")
        return None
    data = bytes(buf)
    buf.clear()
    return data


def _counted(raw: bytes, state: StreamState, now: float) -> bool:
    """Whether a mid-stream cumulative /generate event was read by search alone: it has `completion_tokens`
    and a null `finish_reason`, and a token count above the last one is marked as a chunk at `now`."""
    mark = state.last_mark
    if mark is None:
        return False
    i = raw.rfind(b'"completion_tokens"')
    m = COMPLETION_AT.match(raw, i) if i >= 0 else None
    j = raw.rfind(b'"finish_reason"')
    if m is None or j < 0 or FINISH_NULL_AT.match(raw, j) is None:
        return False
    ct = int(m.group(1))
    record = state.r
    if ct > state.last_tokens:
        state.check_tokens(ct)
        record.chunk_gaps_s.append(now - mark)
        record.chunk_tokens.append(ct - state.last_tokens)
        state.last_mark, state.last_tokens = now, ct
    record.completion_tokens = ct
    return True


async def consume(resp: aiohttp.ClientResponse, state: StreamState, *, api: str, incremental_text: bool,
                  line_cap: int) -> bool:
    """Read SSE events as bytes arrive; returns True when the stream ended with [DONE].

    This is the per-chunk hot path. Cumulative /generate events grow with the reply, so a
    full JSON parse of each would cost O(reply) per chunk: mid-stream events are only
    searched, from the end where SGLang puts meta_info, for `completion_tokens` and a null
    `finish_reason` (inside JSON strings quotes are escaped, so text cannot fake the keys).
    An event is parsed fully when it is the first, finishes the request, lacks the counter
    (an error) or when text arrives incrementally.

    A partial event waits in `buf`, searched only where new bytes arrived (linear in the event's
    length); one longer than line_cap fails the request.
    """
    perf = time.perf_counter
    loads = json.loads
    fast = api == "generate" and not incremental_text
    on_event = state.generate_event if api == "generate" else state.chat_event
    content = resp.content
    buf = bytearray()
    pending: bytes | None = None  # last searched-only event, parsed at the end if needed
    while True:
        data = await content.readany()
        if not data:
            break
        now = perf()
        state.activity = now
        if (joined := _joined(buf, data, line_cap)) is None:
            continue
        data = joined
        start = 0
        while (cut := data.find(b"\n\n", start)) >= 0:
            if cut - start > line_cap:
                raise StreamLimit(f"an SSE event longer than the {size_text(line_cap)} line cap")
            block = data[start:cut]
            start = cut + 2
            for raw in block.split(b"\n") if b"\n" in block else (block,):
                if not raw.startswith(b"data:"):
                    continue
                if fast and _counted(raw, state, now):
                    pending = raw
                    continue
                payload = raw[5:].strip()
                if payload == b"[DONE]":
                    if pending is not None:
                        on_event(decode(loads, pending[5:]), now)
                    state.end = now
                    await drain(resp, state)
                    return True
                pending = None
                on_event(decode(loads, payload), now)
        if start < len(data):
            if len(data) - start > line_cap:
                raise StreamLimit(f"an SSE event longer than the {size_text(line_cap)} line cap")
            buf += data[start:]
    state.end = perf()
    if pending is not None:
        on_event(decode(loads, pending[5:]), state.end)
    return False
