"""What the bench measures for one streamed request, and the numbers derived from it: the one record of a
request, filled while it streams and written as one line of a cell's `<name>.requests.jsonl`.

* TTFT: request sent -> first chunk that carries output tokens.
* chunk gap: time between consecutive token-carrying chunks, raw (not divided by the tokens in the
  chunk). Under speculation one chunk is one verify pass, so this is about the verify latency.
* e2e: request sent -> end of the stream.
* TPOT: (e2e - TTFT) / (completion_tokens - 1), as in sglang.benchmark.serving.
* accept length: completion_tokens / spec_verify_ct from the final meta_info (None when the
  server reports no verify passes: no speculation, or an API that does not return them).
* correct-drafts histogram: the final meta_info's (or chat's `sglext.spec_tokens_details`)
  `spec_correct_drafts_histogram`, bin k = verify passes that accepted k draft tokens, the bonus token
  excluded (None when the server sends none; bench/bundle/acceptance.py derives the per-position rates).

A row read back from a requests file is checked as this record (strict: "0.01" is not a number). Rows of
older kits may lack `repeat` or `ttft_s`; the derived numbers they were written with are kept then.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from bench import JsonObject

DERIVED = ("tpot_s", "output_tps", "accept_length")  # written with the row, computed from it


class RequestRecord(BaseModel):
    """Everything measured for one request; `ok` False means the run that holds it is invalid. `concurrency`
    (closed loop) or `request_rate` (open loop) and `repeat` place it in its cell (set when it is written)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, populate_by_name=True)

    prompt_id: str = ""
    ok: bool | None = False
    error: str | None = None
    start_s: float = 0.0  # send time, seconds after the repeat started
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_gaps_s: list[float] = []
    chunk_tokens: list[int | None] = []
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    spec_verify_ct: int | None = None
    spec_correct_drafts_histogram: list[int] | None = None
    finish_reason: str | None = None
    text: str | None = ""
    concurrency: int | None = None
    request_rate: float | None = None  # an open-loop repeat's rate, requests/s (closed loop: None)
    scheduled_s: float | None = None  # open loop: when it was due, seconds after the repeat started
    queue_time_s: float | None = None  # the server's queue wait (`/generate` meta_info queue_time, --enable-metrics)
    repeat: int | None = None
    # the derived numbers a row was written with: read when the row cannot give them again (older rows)
    written_tpot_s: float | None = Field(None, alias="tpot_s")
    written_output_tps: float | None = Field(None, alias="output_tps")
    written_accept_length: float | None = Field(None, alias="accept_length")

    @field_validator("text", mode="before")
    @classmethod
    def _no_text(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def chunks(self) -> int:
        return len(self.chunk_tokens)

    @property
    def tpot_s(self) -> float | None:
        n = self.completion_tokens
        if not self.ok or n is None or n < 2 or self.e2e_s is None or self.ttft_s is None:
            return self.written_tpot_s
        return (self.e2e_s - self.ttft_s) / (n - 1)

    @property
    def output_tps(self) -> float | None:
        if not self.ok or not self.completion_tokens or not self.e2e_s:
            return self.written_output_tps
        return self.completion_tokens / self.e2e_s

    @property
    def accept_length(self) -> float | None:
        if not self.ok or not self.spec_verify_ct or not self.completion_tokens:
            return self.written_accept_length
        return self.completion_tokens / self.spec_verify_ct

    def placed(self, concurrency: int | None, repeat: int, request_rate: float | None = None) -> RequestRecord:
        """The same record at a level (a concurrency, or an open-loop rate) and repeat of its cell."""
        return self.model_copy(update={"concurrency": concurrency, "request_rate": request_rate, "repeat": repeat})

    @model_serializer(mode="wrap")
    def _row(self, handler: Any) -> JsonObject:
        data: JsonObject = handler(self)
        for key in DERIVED:
            data.pop(f"written_{key}", None)
            data[key] = getattr(self, key)
        for key in ("concurrency", "request_rate", "scheduled_s", "queue_time_s", "repeat",
                    "spec_correct_drafts_histogram"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def __eq__(self, other: object) -> bool:
        """The same row: what a requests file holds of the two is the same."""
        return isinstance(other, RequestRecord) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def to_json(self) -> JsonObject:
        """The requests-file row: every measured field, the derived numbers, and its level and repeat when placed."""
        return self.model_dump(mode="json")
