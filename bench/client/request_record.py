"""What the bench measures for one streamed request, and the numbers derived from it.

* TTFT: request sent -> first chunk that carries output tokens.
* chunk gap: time between consecutive token-carrying chunks, raw (not divided by the tokens in the
  chunk). Under speculation one chunk is one verify pass, so this is about the verify latency.
* e2e: request sent -> end of the stream.
* TPOT: (e2e - TTFT) / (completion_tokens - 1), as in sglang.benchmark.serving.
* accept length: completion_tokens / spec_verify_ct from the final meta_info (None when the
  server reports no verify passes: no speculation, or an API that does not return them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    """Everything measured for one request; `ok` False means the run that holds it is invalid."""

    prompt_id: str
    ok: bool = False
    error: str | None = None
    start_s: float = 0.0  # send time, seconds after the repeat started
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_gaps_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int | None] = field(default_factory=list)
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    spec_verify_ct: int | None = None
    finish_reason: str | None = None
    text: str = ""

    @property
    def chunks(self) -> int:
        return len(self.chunk_tokens)

    @property
    def tpot_s(self) -> float | None:
        n = self.completion_tokens
        if not self.ok or n is None or n < 2 or self.e2e_s is None or self.ttft_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (n - 1)

    @property
    def output_tps(self) -> float | None:
        if not self.ok or not self.completion_tokens or not self.e2e_s:
            return None
        return self.completion_tokens / self.e2e_s

    @property
    def accept_length(self) -> float | None:
        if not self.ok or not self.spec_verify_ct or not self.completion_tokens:
            return None
        return self.completion_tokens / self.spec_verify_ct

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(tpot_s=self.tpot_s, output_tps=self.output_tps, accept_length=self.accept_length)
        return data
