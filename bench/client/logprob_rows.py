"""Log-probabilities out of an SGLang 0.5.23 reply, one `TokenLogprob` per generated token.

- /generate with ``return_logprob`` and ``top_logprobs_num``: ``meta_info.output_token_logprobs`` holds
  ``(logprob, token_id, text-or-None)`` rows and ``meta_info.output_top_logprobs`` one list of such rows per
  position, or null where a position has none (sglang/srt/managers/tokenizer_manager.py
  ``add_logprob_to_meta_info``, 2840-2973, and ``detokenize_logprob_tokens``, 3098-3116). Tokens are keyed by id.
- /v1/chat/completions with ``logprobs`` and ``top_logprobs``: ``choices[0].logprobs.content`` holds
  ``{token, bytes, logprob, top_logprobs}`` (entrypoints/openai/protocol.py ``ChatCompletionTokenLogprob``,
  157-172; built by serving_chat.py ``_process_response_logprobs``, 3053). The chat API names tokens by their
  text, so they are keyed by it.

Reading never raises, whatever the reply holds (`read_generate`, `read_chat`): it gives the rows, or None and
why. None without a reason: the reply has none (an older or another server, or one that ignored the request).
None with a reason naming the field: the reply has them, malformed, and a malformed reply proves nothing, so
it is no evidence either way: a log-probability that is no number (a string, a bool, null), not finite, above
`LOGPROB_SLACK` (a log-probability is at most 0; the slack is for float rounding, far below the gate's smallest
limit, 0.0055 nats) or below `LOGPROB_FLOOR`; a /generate token id that is no int in [0, MAX_TOKEN_ID] or listed
twice among one position's alternatives; a list or object of another type; alternatives for another number of
positions than there are tokens; no token at all. The gate then says "not enough evidence" with that reason
(bench/run/correctness.py), never a PASS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenLogprob:
    """One generated position: the chosen token, its log-probability, and the top alternatives
    (token id -> log-probability) the server returned there."""

    token_id: int | str  # an id (/generate), or the token text (the chat API names tokens so)
    logprob: float
    top: Mapping[int | str, float] = field(default_factory=dict)


LOGPROB_SLACK = 1e-6  # nats above 0 still read as a log-probability (float rounding of a log-softmax)
LOGPROB_FLOOR = -1e30  # nats: below it a number is no log-probability (and sums of moves stay finite)
MAX_TOKEN_ID = 2**31 - 1  # a vocabulary index
Rows = list[TokenLogprob]


class Malformed(ValueError):
    """A field of a reply that is not what SGLang sends; the message names it."""


def _what(value: Any) -> str:
    """A short description of a value for a reason (never the whole of a large one)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value[:24] + "..." if len(value) > 24 else value)
    if isinstance(value, int):
        return str(value) if abs(value) < 10**18 else "an integer of 19 digits or more"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _logprob(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Malformed(f"{where} is {_what(value)}, not a log-probability (a number)")
    if isinstance(value, float) and not math.isfinite(value):
        raise Malformed(f"{where} is {_what(value)}, not a finite log-probability")
    if value > LOGPROB_SLACK:  # int against float compares exactly, however large the int
        raise Malformed(f"{where} is {_what(value)}: a log-probability is at most 0")
    if value < LOGPROB_FLOOR:
        raise Malformed(f"{where} is {_what(value)}, below {LOGPROB_FLOOR:g}: not a log-probability")
    return float(value)


def _token_id(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_ID:
        raise Malformed(f"{where} is {_what(value)}, not a token id (an integer from 0 to {MAX_TOKEN_ID})")
    return value


def _token_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{where} is {_what(value)}, not a token (a string)")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise Malformed(f"{where} is {_what(value)}, not a list")
    return list(value)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Malformed(f"{where} is {_what(value)}, not an object")
    return value


def _generate_row(row: Any, where: str) -> tuple[float, int]:
    """(logprob, token id) of one ``[logprob, token_id, text-or-None]`` row."""
    row = _list(row, where)
    if len(row) < 2:
        raise Malformed(f"{where} has {len(row)} item(s), not [logprob, token_id, text]")
    return _logprob(row[0], f"{where}[0]"), _token_id(row[1], f"{where}[1]")


def _generate(body: Mapping[str, Any]) -> Rows | None:
    meta = body.get("meta_info")
    if meta is None:
        return None
    meta = _object(meta, "meta_info")
    field, top_field = "meta_info.output_token_logprobs", "meta_info.output_top_logprobs"
    rows = meta.get("output_token_logprobs")
    if rows is None:
        return None
    rows = _list(rows, field)
    if not rows:
        raise Malformed(f"{field} is empty: no generated token has a log-probability")
    tops = meta.get("output_top_logprobs")
    if tops is None:  # asked for no alternatives, or a server that sends none: every flip is then out of the top-k
        tops = [None] * len(rows)
    tops = _list(tops, top_field)
    if len(tops) != len(rows):
        raise Malformed(f"{top_field} has {len(tops)} positions and {field} {len(rows)}: they must agree")
    out = []
    for i, (row, top) in enumerate(zip(rows, tops, strict=True)):
        lp, token = _generate_row(row, f"{field}[{i}]")
        alts: dict[int | str, float] = {}
        for j, alt in enumerate(_list(top, f"{top_field}[{i}]") if top is not None else []):
            a_lp, a_token = _generate_row(alt, f"{top_field}[{i}][{j}]")
            if a_token in alts:
                raise Malformed(f"{top_field}[{i}] lists token {a_token} twice")
            alts[a_token] = a_lp
        out.append(TokenLogprob(token, lp, alts))
    return out


def _chat(body: Mapping[str, Any]) -> Rows | None:
    choices = body.get("choices")
    if choices is None:
        return None
    choices = _list(choices, "choices")
    if not choices:
        raise Malformed("choices is empty")
    choice = _object(choices[0], "choices[0]")
    lps = choice.get("logprobs")
    if lps is None:
        return None
    lps = _object(lps, "choices[0].logprobs")
    field = "choices[0].logprobs.content"
    content = lps.get("content")
    if content is None:
        return None
    content = _list(content, field)
    if not content:
        raise Malformed(f"{field} is empty: no generated token has a log-probability")
    out = []
    for i, item in enumerate(content):
        where = f"{field}[{i}]"
        item = _object(item, where)
        token, lp = _token_text(item.get("token"), f"{where}.token"), _logprob(item.get("logprob"), f"{where}.logprob")
        tops = item.get("top_logprobs")
        alts: dict[int | str, float] = {}
        for j, alt in enumerate(_list(tops, f"{where}.top_logprobs") if tops is not None else []):
            at = f"{where}.top_logprobs[{j}]"
            alt = _object(alt, at)
            a_token, a_lp = _token_text(alt.get("token"), f"{at}.token"), _logprob(alt.get("logprob"), f"{at}.logprob")
            alts.setdefault(a_token, a_lp)  # two token ids may decode to the same text: the first (likelier) counts
        out.append(TokenLogprob(token, lp, alts))
    return out


def read_generate(body: Any) -> tuple[Rows | None, str | None]:
    """(rows, None), (None, None) when the reply has none, or (None, why) when they are malformed."""
    try:
        return _generate(_object(body, "the reply")), None
    except Malformed as exc:
        return None, str(exc)


def read_chat(body: Any) -> tuple[Rows | None, str | None]:
    """As `read_generate`, for a chat completion."""
    try:
        return _chat(_object(body, "the reply")), None
    except Malformed as exc:
        return None, str(exc)


def from_generate(body: Mapping[str, Any]) -> Rows | None:
    """The rows; None when the reply has none or they are malformed (`read_generate` says which)."""
    return read_generate(body)[0]


def from_chat(body: Mapping[str, Any]) -> Rows | None:
    return read_chat(body)[0]


def to_json(rows: list[TokenLogprob] | None) -> list[list[Any]] | None:
    """Rows as a bundle keeps them: [token, logprob, [[token, logprob], ...]]."""
    if rows is None:
        return None
    return [[r.token_id, r.logprob, [[k, v] for k, v in r.top.items()]] for r in rows]


def _stored_key(value: Any, where: str) -> int | str:
    return value if isinstance(value, str) else _token_id(value, where)


def from_json(data: Any) -> list[TokenLogprob] | None:
    """What `to_json` wrote; None for anything else (a damaged or hand-edited file proves nothing)."""
    try:
        rows = _list(data, "rows")
        if not rows:
            return None
        out = []
        for i, row in enumerate(rows):
            row = _list(row, f"row {i}")
            if len(row) != 3:
                return None
            token, lp = _stored_key(row[0], "token"), _logprob(row[1], "logprob")
            alts: dict[int | str, float] = {}
            for a in _list(row[2], "top"):
                a = _list(a, "alternative")
                if len(a) != 2:
                    return None
                alts[_stored_key(a[0], "token")] = _logprob(a[1], "logprob")
            out.append(TokenLogprob(token, lp, alts))
        return out
    except Malformed:
        return None
