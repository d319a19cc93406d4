"""Server-sent events of SGLang's two streaming APIs turned into timing marks on a RequestRecord."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench.request_record import RequestRecord

COMPLETION_AT = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
FINISH_NULL_AT = re.compile(rb'"finish_reason"\s*:\s*null')



class ServerError(Exception):
    """The server sent an error object inside the stream."""


def decode(loads: Callable[[bytes], Any], payload: bytes) -> dict[str, Any]:
    event = loads(payload)
    if not isinstance(event, dict):
        raise ValueError(f"unexpected stream event {payload[:80]!r}")
    if "error" in event and not event.get("choices"):
        err = event["error"]
        raise ServerError(err.get("message", err) if isinstance(err, dict) else err)
    return event



def _finish_type(value: Any) -> str | None:
    if isinstance(value, dict):
        return str(value.get("type")) if value.get("type") is not None else "finished"
    return str(value) if value else None


class StreamState:
    """Per-request parser state; one method per API turns an SSE payload into timing marks."""

    def __init__(self, record: RequestRecord, sent: float, incremental_text: bool):
        self.r = record
        self.sent = sent
        self.last_mark: float | None = None
        self.last_tokens = 0
        self.incremental = incremental_text
        self.done = False
        self.end = sent
        self.activity = sent  # last time bytes arrived (read-timeout watchdog)
        self.timed_out = False

    def _mark(self, now: float, tokens: int | None) -> None:
        if self.last_mark is None:
            self.r.ttft_s = now - self.sent
        else:
            self.r.chunk_gaps_s.append(now - self.last_mark)
        self.r.chunk_tokens.append(tokens)
        self.last_mark = now

    def generate_event(self, data: dict[str, Any], now: float) -> None:
        meta = data.get("meta_info") or {}
        ct = meta.get("completion_tokens")
        if isinstance(ct, int):
            if ct > self.last_tokens:
                self._mark(now, ct - self.last_tokens)
                self.last_tokens = ct
            self.r.completion_tokens = ct
        text = data.get("text")
        if isinstance(text, str):
            self.r.text = self.r.text + text if self.incremental else text
        if "spec_verify_ct" in meta:
            self.r.spec_verify_ct = meta.get("spec_verify_ct")
        if meta.get("prompt_tokens") is not None:
            self.r.prompt_tokens = meta.get("prompt_tokens")
        finish = _finish_type(meta.get("finish_reason"))
        if finish:
            self.r.finish_reason = finish
            self.done = True

    def chat_event(self, data: dict[str, Any], now: float) -> None:
        for choice in data.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                self._mark(now, None)
                self.r.text += content
            finish = _finish_type(choice.get("finish_reason"))
            if finish:
                self.r.finish_reason = finish
                self.done = True
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.r.completion_tokens = usage.get("completion_tokens", self.r.completion_tokens)
            self.r.prompt_tokens = usage.get("prompt_tokens", self.r.prompt_tokens)
        details = (data.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        if isinstance(details, dict) and "spec_verify_ct" in details:
            self.r.spec_verify_ct = details.get("spec_verify_ct")


