"""Server-sent events of SGLang's two streaming APIs turned into timing marks on a RequestRecord."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench import JsonObject
from bench.client.request_record import RequestRecord

COMPLETION_AT = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,18})(?!\d)')
FINISH_NULL_AT = re.compile(rb'"finish_reason"\s*:\s*null')
HISTOGRAM = "spec_correct_drafts_histogram"
MAX_BINS = 1024  # a correct-drafts histogram's most bins: one per draft token, far fewer in any real config


class ServerError(Exception):
    """The server sent an error object inside the stream."""


class MalformedEvent(ValueError):
    """An event the bench cannot read (wrong shape or type): the request fails, the bench goes on."""


class StreamLimit(ValueError):
    """The stream went past a bound (tokens, text); a hostile or broken server cannot hold the bench."""


def decode(loads: Callable[[bytes], Any], payload: bytes) -> JsonObject:
    try:
        event = loads(payload)
    except RecursionError as exc:
        raise MalformedEvent("stream event nested too deep") from exc
    if not isinstance(event, dict):
        raise MalformedEvent(f"unexpected stream event {payload[:80]!r}")
    if "error" in event and not event.get("choices"):
        err = event["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise ServerError(str(msg)[:300])
    return event


def _obj(value: Any, what: str) -> JsonObject:
    """`value` when it is a JSON object, {} when absent; any other type is a malformed event."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedEvent(f"{what} is {type(value).__name__}, not an object")
    return value


def _count(value: Any, what: str) -> int | None:
    """A token or pass count: a non-negative integer (not a bool, not a string) or absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedEvent(f"{what} is {str(value)[:40]!r}, not a non-negative integer")
    return value


def _seconds(value: Any, what: str) -> float | None:
    """A duration in seconds: a finite number >= 0 (not a bool, not a string) or absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise MalformedEvent(f"{what} is {str(value)[:40]!r}, not a duration in seconds")
    return float(value)


def _histogram(value: Any, what: str) -> list[int] | None:
    """A histogram of counts: a list (at most MAX_BINS long) of non-negative integers, or absent."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_BINS:
        shown = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
        raise MalformedEvent(f"{what} is {shown}, not a list of at most {MAX_BINS} counts")
    counts: list[int] = []
    for i, v in enumerate(value):
        count = _count(v, f"{what}[{i}]")
        if count is None:
            raise MalformedEvent(f"{what}[{i}] is null, not a non-negative integer")
        counts.append(count)
    return counts


def _text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedEvent(f"{what} is {type(value).__name__}, not a string")


def _finish_type(value: Any) -> str | None:
    if isinstance(value, dict):
        return str(value.get("type"))[:80] if value.get("type") is not None else "finished"
    return str(value)[:80] if value else None


class StreamState:
    """Per-request parser state; one method per API turns an SSE payload into timing marks."""

    def __init__(
        self, record: RequestRecord, sent: float, incremental_text: bool, *, max_tokens: int | None = None,
        max_text: int | None = None,
    ):
        self.r = record
        self.max_tokens = max_tokens  # the most output tokens (and content chunks) a request may get
        self.max_text = max_text  # the most characters of reply text a request may get
        self.sent = sent
        self.last_mark: float | None = None
        self.last_tokens = 0
        self.incremental = incremental_text
        self.done = False
        self.end = sent
        self.activity = sent  # last time bytes arrived (read-timeout watchdog)
        self.timed_out: str | None = None  # why the watchdog cancelled the request
        self.closing = False  # [DONE] seen: only the drain is left, which bounds itself

    def check_tokens(self, tokens: int) -> None:
        """A stream past --max-tokens plus the margin never ends on its own terms: end it."""
        if self.max_tokens is not None and tokens > self.max_tokens:
            raise StreamLimit(f"the server sent {tokens} tokens, more than the {self.max_tokens} allowed "
                              "(--max-tokens plus margin)")

    def _set_text(self, text: str) -> None:
        if self.max_text is not None and len(text) > self.max_text:
            raise StreamLimit(f"reply text longer than {self.max_text} characters (the line cap)")
        self.r.text = text

    def _mark(self, now: float, tokens: int | None) -> None:
        if self.last_mark is None:
            self.r.ttft_s = now - self.sent
        else:
            self.r.chunk_gaps_s.append(now - self.last_mark)
        self.r.chunk_tokens.append(tokens)
        self.last_mark = now

    def generate_event(self, data: JsonObject, now: float) -> None:
        meta = _obj(data.get("meta_info"), "meta_info")
        ct = _count(meta.get("completion_tokens"), "meta_info.completion_tokens")
        if ct is not None:
            self.check_tokens(ct)
            if ct > self.last_tokens:
                self._mark(now, ct - self.last_tokens)
                self.last_tokens = ct
            self.r.completion_tokens = ct
        text = _text(data.get("text"), "text")
        if text is not None:
            self._set_text(self.r.text + text if self.incremental else text)
        if "spec_verify_ct" in meta:
            self.r.spec_verify_ct = _count(meta.get("spec_verify_ct"), "meta_info.spec_verify_ct")
        if "queue_time" in meta:  # with --enable-metrics: the scheduler's queue wait (docs/evidence.md)
            self.r.queue_time_s = _seconds(meta.get("queue_time"), "meta_info.queue_time")
        if HISTOGRAM in meta:
            self.r.spec_correct_drafts_histogram = _histogram(meta.get(HISTOGRAM), f"meta_info.{HISTOGRAM}")
        prompt_tokens = _count(meta.get("prompt_tokens"), "meta_info.prompt_tokens")
        if prompt_tokens is not None:
            self.r.prompt_tokens = prompt_tokens
        finish = _finish_type(meta.get("finish_reason"))
        if finish:
            self.r.finish_reason = finish
            self.done = True

    def chat_event(self, data: JsonObject, now: float) -> None:
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise MalformedEvent(f"choices is {type(choices).__name__}, not a list")
        for choice in choices:
            choice = _obj(choice, "choices[]")
            content = _text(_obj(choice.get("delta"), "choices[].delta").get("content"), "delta.content")
            if content:
                self._mark(now, None)
                self.check_tokens(len(self.r.chunk_tokens))  # every content chunk carries a token at least
                self._set_text(self.r.text + content)
            finish = _finish_type(choice.get("finish_reason"))
            if finish:
                self.r.finish_reason = finish
                self.done = True
        usage = _obj(data.get("usage"), "usage")
        completion = _count(usage.get("completion_tokens"), "usage.completion_tokens")
        if completion is not None:
            self.check_tokens(completion)
            self.r.completion_tokens = completion
        prompt_tokens = _count(usage.get("prompt_tokens"), "usage.prompt_tokens")
        if prompt_tokens is not None:
            self.r.prompt_tokens = prompt_tokens
        details = _obj(data.get("sglext"), "sglext").get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        details = _obj(details, "sglext.spec_tokens_details")
        if "spec_verify_ct" in details:
            self.r.spec_verify_ct = _count(details.get("spec_verify_ct"), "spec_tokens_details.spec_verify_ct")
        if HISTOGRAM in details:
            self.r.spec_correct_drafts_histogram = _histogram(details.get(HISTOGRAM), f"spec_tokens_details.{HISTOGRAM}")
