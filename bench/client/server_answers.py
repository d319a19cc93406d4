"""What the bench reads out of particular answers of the server: the most requests it runs at once (its
/server_info) and one reply of a correctness pass (a /generate or chat body with log-probabilities).

Neither raises on a field the bench cannot use: a missing cap is None, a malformed log-probability field
is the reply's `problem`. Only a body that is no JSON object fails, naming the prompt, never quoting the body.
"""

from __future__ import annotations

import json
from typing import Any

from bench import JsonObject
from bench.client import reply as replies
from bench.client.reply import Reply
from launcher.errors import RuntimeFailure


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def running_cap(info: JsonObject) -> int | None:
    """The most requests the server runs at once, from its /server_info; None when it does not say.

    SGLang 0.5.23 reports two values. `internal_states[i].effective_max_running_requests_per_dp` is the
    scheduler's own limit on DP rank i (scheduler_components/internal_state.py:73; the scheduler takes it
    from the memory pool, mem_cache/kv_cache_configurator.py:3119-3132: --max-running-requests, or 48 under
    speculation, capped by the KV cache's token capacity); their sum is what the server runs at once. The
    top-level `max_running_requests` is the resolved server argument (server_args.py:316-333; 48 under
    EAGLE/EAGLE3/NGRAM without --max-running-requests, srt/arg_groups/speculative_hook.py:1086-1093 and
    :1294-1298; null without speculation): the fallback when no internal state gives the limit. Requests
    above the limit wait in SGLang's queue, and their wait is part of their TTFT."""
    states = info.get("internal_states")
    if isinstance(states, list) and states:
        per_rank = [_count(s.get("effective_max_running_requests_per_dp")) if isinstance(s, dict) else None
                    for s in states]
        if all(n is not None for n in per_rank):
            return sum(n for n in per_rank if n is not None)
    return _count(info.get("max_running_requests"))


def logprob_reply(prompt_id: str, body: bytes, *, api: str, concurrency: int, request: JsonObject) -> Reply:
    """The correctness pass's reply to prompt `prompt_id`, read from its body: its text, its log-probability
    rows (None when the server sent none, or sent them malformed: the reply's `problem` names the field), and
    the raw request and body kept. RuntimeFailure naming the prompt when the body is no JSON object."""
    try:
        data = replies.storable(json.loads(body))
    except RecursionError:
        raise RuntimeFailure(f"prompt {prompt_id}: log-probability reply is not JSON the bench can read "
                             "(nested too deep)") from None
    except ValueError as exc:
        raise RuntimeFailure(f"prompt {prompt_id}: log-probability reply is not JSON the bench can read "
                             f"({_json_why(exc)})") from None
    if not isinstance(data, dict):
        raise RuntimeFailure(f"prompt {prompt_id}: log-probability reply is not a JSON object")
    rows, problem = replies.read(data, api)  # never raises: a malformed field is no evidence, and says so
    return Reply(prompt_id, concurrency, replies.text_of(data, api), rows, request, data, problem)


def _json_why(exc: ValueError) -> str:
    """A short reason a body is no JSON the bench reads, never the body itself."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    return str(exc)[:120] or type(exc).__name__
