"""Log-probabilities out of an SGLang 0.5.23 reply, one `TokenLogprob` per generated token.

- /generate with ``return_logprob`` and ``top_logprobs_num``: ``meta_info.output_token_logprobs`` holds
  ``(logprob, token_id, text-or-None)`` rows and ``meta_info.output_top_logprobs`` one list of such rows per
  position (sglang/srt/managers/tokenizer_manager.py ``add_logprob_to_meta_info``, 2840-2973, and
  ``detokenize_logprob_tokens``, 3098-3116). Tokens are keyed by id.
- /v1/chat/completions with ``logprobs`` and ``top_logprobs``: ``choices[0].logprobs.content`` holds
  ``{token, bytes, logprob, top_logprobs}`` (entrypoints/openai/protocol.py ``ChatCompletionTokenLogprob``,
  157-172; built by serving_chat.py ``_process_response_logprobs``, 3053). The chat API names tokens by their
  text, so they are keyed by it.

A reply without them (an older or another server, or one that ignored the request) gives None: the gate
then has no evidence, which it says, rather than a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.run.logprob_gate import TokenLogprob


def _lp(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _key(value: Any) -> int | str | None:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def from_generate(body: Mapping[str, Any]) -> list[TokenLogprob] | None:
    meta = body.get("meta_info")
    rows = meta.get("output_token_logprobs") if isinstance(meta, Mapping) else None
    if not isinstance(rows, list) or not rows:
        return None
    tops = meta.get("output_top_logprobs")
    tops = tops if isinstance(tops, list) and len(tops) == len(rows) else [None] * len(rows)
    out = []
    for row, top in zip(rows, tops, strict=True):
        if not isinstance(row, list | tuple) or len(row) < 2 or _lp(row[0]) is None or _key(row[1]) is None:
            return None
        alts = {}
        for alt in top if isinstance(top, list) else []:  # a malformed alternatives list proves nothing
            if isinstance(alt, list | tuple) and len(alt) >= 2 and _lp(alt[0]) is not None and _key(alt[1]) is not None:
                alts[alt[1]] = float(alt[0])
        out.append(TokenLogprob(row[1], float(row[0]), alts))
    return out


def from_chat(body: Mapping[str, Any]) -> list[TokenLogprob] | None:
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    lps = choice.get("logprobs")
    content = lps.get("content") if isinstance(lps, Mapping) else None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for item in content:
        if not isinstance(item, Mapping) or _lp(item.get("logprob")) is None or not isinstance(item.get("token"), str):
            return None
        tops = item.get("top_logprobs")
        alts = {a["token"]: float(a["logprob"]) for a in (tops if isinstance(tops, list) else [])
                if isinstance(a, Mapping) and isinstance(a.get("token"), str) and _lp(a.get("logprob")) is not None}
        out.append(TokenLogprob(item["token"], float(item["logprob"]), alts))
    return out


def to_json(rows: list[TokenLogprob] | None) -> list[list[Any]] | None:
    """Rows as a bundle keeps them: [token, logprob, [[token, logprob], ...]]."""
    if rows is None:
        return None
    return [[r.token_id, r.logprob, [[k, v] for k, v in r.top.items()]] for r in rows]


def from_json(data: Any) -> list[TokenLogprob] | None:
    """What `to_json` wrote; None for anything else (a damaged or hand-edited file proves nothing)."""
    if not isinstance(data, list) or not data:
        return None
    out = []
    for row in data:
        if not (isinstance(row, list) and len(row) == 3 and _key(row[0]) is not None and _lp(row[1]) is not None
                and isinstance(row[2], list)):
            return None
        alts = {a[0]: float(a[1]) for a in row[2]
                if isinstance(a, list) and len(a) == 2 and _key(a[0]) is not None and _lp(a[1]) is not None}
        out.append(TokenLogprob(row[0], float(row[1]), alts))
    return out
