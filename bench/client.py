"""Streaming load client for SGLang (native /generate or OpenAI chat) and the kit's control API.

aiohttp, not httpx: its HTTP parser and stream reader are C-accelerated (llhttp), so reading one
streamed line costs a few microseconds, while httpx's async streaming goes through pure-Python
h11 and anyio layers. The client must stay far below the server's chunk interval (a verify pass
is 10-30 ms); `tools/bench_accuracy.py` measures the CPU cost per chunk.

Timing of one request (all from `time.perf_counter()` taken when a line is read):
* TTFT: request sent -> first chunk that carries output tokens.
* chunk gap: time between consecutive token-carrying chunks, raw (not divided by the tokens in the
  chunk). Under speculation one chunk is one verify pass, so this is about the verify latency.
* e2e: request sent -> end of the stream.
* TPOT: (e2e - TTFT) / (completion_tokens - 1), as in sglang.benchmark.serving.
* accept length: completion_tokens / spec_verify_ct from the final meta_info (None when the
  server reports no verify passes: no speculation, or an API that does not return them).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from bench.workload import Prompt
from launcher.errors import RuntimeFailure

APIS = ("generate", "chat")
READ_BUFSIZE = 4 * 1024 * 1024  # cumulative /generate text grows with the reply; lines can be long
DEFAULT_READ_TIMEOUT_S = 600.0


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


def _finish_type(value: Any) -> str | None:
    if isinstance(value, dict):
        return str(value.get("type")) if value.get("type") is not None else "finished"
    return str(value) if value else None


class _StreamState:
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


class ServerClient:
    """One aiohttp session against an SGLang-compatible server (real or the SIMULATED stand-in)."""

    def __init__(
        self,
        url: str,
        *,
        api: str = "generate",
        max_tokens: int = 256,
        ignore_eos: bool = False,
        connect_timeout: float = 5.0,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
        concurrency: int = 64,
    ):
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}")
        self.url = url.rstrip("/")
        self.api = api
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.concurrency = concurrency
        self.model = "default"
        self.incremental_text = False
        self._session: aiohttp.ClientSession | None = None
        self._inflight: dict[asyncio.Task[Any], _StreamState] = {}
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ServerClient:
        # No aiohttp sock_read timeout: it re-arms a timer on every received chunk. One watchdog
        # task checks every in-flight request's last activity instead.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            connector=aiohttp.TCPConnector(limit=max(8, self.concurrency + 4)),
            read_bufsize=READ_BUFSIZE,
            trace_configs=[_send_time_trace()],
        )
        self._watchdog = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use ServerClient as an async context manager")
        return self._session

    async def _watch(self) -> None:
        """Cancel requests that received nothing for read_timeout seconds (a hung server)."""
        period = max(0.05, min(1.0, self.read_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.perf_counter()
            for task, state in list(self._inflight.items()):
                if not state.timed_out and now - state.activity > self.read_timeout:
                    state.timed_out = True
                    task.cancel()

    # ----- probes ------------------------------------------------------------------------------
    async def health(self, timeout: float | None = None) -> int:
        """HTTP status of /health (503 while starting); raises aiohttp errors when unreachable."""
        t = aiohttp.ClientTimeout(total=timeout or self.connect_timeout + 30, sock_connect=self.connect_timeout)
        async with self.session.get(f"{self.url}/health", timeout=t) as resp:
            await resp.read()
            return resp.status

    async def preflight(self) -> None:
        """Fail fast (within the connect timeout) when nothing listens at the URL."""
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        try:
            async with self.session.get(f"{self.url}/health", timeout=t) as resp:
                await resp.read()
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise RuntimeFailure(
                f"cannot reach the server at {self.url} ({_why(exc)}); is it running? check --url"
            ) from exc

    async def wait_healthy(self, timeout: float) -> None:
        """Poll /health until 200; connection errors count as 'not yet' (the server may be restarting)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                status = await self.health()
                if status == 200:
                    return
                last = f"HTTP {status}"
            except (TimeoutError, aiohttp.ClientError) as exc:
                last = _why(exc)
            if time.monotonic() >= deadline:
                raise RuntimeFailure(f"{self.url}/health not healthy after {timeout:.0f} s (last: {last})")
            await asyncio.sleep(0.25)

    async def get_json(self, path: str) -> dict[str, Any]:
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        async with self.session.get(f"{self.url}{path}", timeout=t) as resp:
            resp.raise_for_status()
            data = await resp.json(content_type=None)
            return data if isinstance(data, dict) else {"value": data}

    async def server_info(self) -> dict[str, Any]:
        """GET /server_info (SGLang 0.5.23), falling back to the deprecated /get_server_info."""
        try:
            return await self.get_json("/server_info")
        except aiohttp.ClientResponseError as exc:
            if exc.status != 404:
                raise
            return await self.get_json("/get_server_info")

    async def metrics_counters(self) -> dict[str, float] | None:
        """Prometheus counters from /metrics, summed over label sets; None when /metrics is off."""
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        try:
            async with self.session.get(f"{self.url}/metrics", timeout=t) as resp:
                if resp.status != 200:
                    return None
                text = await resp.text()
        except (TimeoutError, aiohttp.ClientError):
            return None
        return parse_prometheus(text)

    def configure_from_server_info(self, info: dict[str, Any]) -> None:
        """Model name for the chat API; whether /generate streams incremental or cumulative text."""
        self.model = str(info.get("served_model_name") or info.get("model_path") or "default")
        self.incremental_text = bool(info.get("incremental_streaming_output") or info.get("stream_output"))

    # ----- one request -------------------------------------------------------------------------
    def _payload(self, prompt: Prompt) -> tuple[str, dict[str, Any]]:
        if self.api == "generate":
            return "/generate", {
                "text": prompt.text(),
                "sampling_params": {
                    "temperature": 0.0,
                    "max_new_tokens": self.max_tokens,
                    "ignore_eos": self.ignore_eos,
                },
                "stream": True,
            }
        return "/v1/chat/completions", {
            "model": self.model,
            "messages": prompt.chat_messages(),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_spec_tokens_details": True,
        }

    async def request(self, prompt: Prompt, t_origin: float) -> RequestRecord:
        """Send one streaming request and time every chunk; errors are recorded, never raised."""
        path, payload = self._payload(prompt)
        record = RequestRecord(prompt_id=prompt.id)
        sent = time.perf_counter()
        record.start_s = sent - t_origin
        state = _StreamState(record, sent, self.incremental_text)
        task = asyncio.current_task()
        if task is not None:
            self._inflight[task] = state
        got_done = False
        box: dict[str, float] = {}
        try:
            async with self.session.post(f"{self.url}{path}", json=payload, trace_request_ctx=box) as resp:
                # TTFT counts from when the body was on the wire, not from when this task began:
                # under concurrency the event loop may run other requests' work in between.
                state.sent = box.get("sent", sent)
                if resp.status != 200:
                    body = (await resp.text())[:300]
                    record.error = f"HTTP {resp.status}: {body.strip()}"
                    return record
                got_done = await self._consume(resp, state)
                record.e2e_s = state.end - state.sent
        except asyncio.CancelledError:
            if not state.timed_out or task is None:
                raise
            task.uncancel()
            record.error = f"stream broke: no data for {self.read_timeout:.0f} s (read timeout)"
            return record
        except _ServerError as exc:
            record.error = f"server error: {exc}"
            return record
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            record.error = f"stream broke: {_why(exc)}"
            return record
        finally:
            if task is not None:
                self._inflight.pop(task, None)
        if not (got_done or state.done):
            record.error = "stream ended before the response finished (no [DONE] and no finish_reason)"
            return record
        if record.ttft_s is None and self.max_tokens > 0:
            record.error = "stream finished without any output tokens"
            return record
        if record.completion_tokens is None:
            record.completion_tokens = sum(t for t in record.chunk_tokens if t) or None
        record.ok = True
        return record

    async def _consume(self, resp: aiohttp.ClientResponse, state: _StreamState) -> bool:
        """Read SSE events as bytes arrive; returns True when the stream ended with [DONE].

        This is the per-chunk hot path. Cumulative /generate events grow with the reply, so a
        full JSON parse of each would cost O(reply) per chunk: mid-stream events are only
        searched, from the end where SGLang puts meta_info, for `completion_tokens` and a null
        `finish_reason` (inside JSON strings quotes are escaped, so text cannot fake the keys).
        An event is parsed fully when it is the first, finishes the request, lacks the counter
        (an error) or when text arrives incrementally.
        """
        perf = time.perf_counter
        loads = json.loads
        fast = self.api == "generate" and not self.incremental_text
        on_event = state.generate_event if self.api == "generate" else state.chat_event
        record = state.r
        gaps, tokens = record.chunk_gaps_s, record.chunk_tokens
        content = resp.content
        buf = b""
        pending: bytes | None = None  # last searched-only event, parsed at the end if needed
        while True:
            data = await content.readany()
            if not data:
                break
            now = perf()
            state.activity = now
            if buf:
                data = buf + data
            start = 0
            while (cut := data.find(b"\n\n", start)) >= 0:
                block = data[start:cut]
                start = cut + 2
                for raw in block.split(b"\n") if b"\n" in block else (block,):
                    if not raw.startswith(b"data:"):
                        continue
                    if fast and state.last_mark is not None:
                        i = raw.rfind(b'"completion_tokens"')
                        m = _COMPLETION_AT.match(raw, i) if i >= 0 else None
                        j = raw.rfind(b'"finish_reason"')
                        if m is not None and j >= 0 and _FINISH_NULL_AT.match(raw, j) is not None:
                            ct = int(m.group(1))
                            if ct > state.last_tokens:
                                gaps.append(now - state.last_mark)
                                tokens.append(ct - state.last_tokens)
                                state.last_mark, state.last_tokens = now, ct
                            record.completion_tokens = ct
                            pending = raw
                            continue
                    payload = raw[5:].strip()
                    if payload == b"[DONE]":
                        if pending is not None:
                            on_event(_decode(loads, pending[5:]), now)
                        state.end = now
                        await resp.read()  # drain to EOF so the connection is reused
                        return True
                    pending = None
                    on_event(_decode(loads, payload), now)
            buf = data[start:] if start < len(data) else b""
        state.end = perf()
        if pending is not None:
            on_event(_decode(loads, pending[5:]), state.end)
        return False

    async def run(
        self,
        prompts: Sequence[Prompt],
        concurrency: int,
        on_done: Callable[[RequestRecord], Awaitable[None] | None] | None = None,
    ) -> tuple[list[RequestRecord], float]:
        """Send every prompt with at most `concurrency` in flight; returns records (prompt order) and wall time."""
        sem = asyncio.Semaphore(concurrency)
        t0 = time.perf_counter()

        async def one(p: Prompt) -> RequestRecord:
            async with sem:
                rec = await self.request(p, t0)
            if on_done is not None:
                res = on_done(rec)
                if asyncio.iscoroutine(res):
                    await res
            return rec

        records = await asyncio.gather(*(one(p) for p in prompts))
        return list(records), time.perf_counter() - t0


class ControlClient:
    """The kit's control API (`launcher serve`): status, profiles and health-gated switches."""

    def __init__(self, url: str, token: str | None, connect_timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.token = token
        self.connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ControlClient:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use ControlClient as an async context manager")
        return self._session

    async def status(self) -> dict[str, Any]:
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        try:
            async with self.session.get(f"{self.url}/status", timeout=t) as resp:
                resp.raise_for_status()
                data = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RuntimeFailure(
                f"cannot read {self.url}/status ({_why(exc)}); is `launcher serve` running? check --control"
            ) from exc
        return data if isinstance(data, dict) else {}

    async def switch(self, profile: str, spec: str, timeout_s: float) -> tuple[int, dict[str, Any]]:
        """POST /switch; returns (HTTP status, body). Connection problems become outcome 'failed'."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        body = {"profile": profile, "spec": spec, "timeout_s": timeout_s}
        t = aiohttp.ClientTimeout(total=timeout_s + 120, sock_connect=self.connect_timeout)
        try:
            async with self.session.post(f"{self.url}/switch", json=body, headers=headers, timeout=t) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {"error": (await resp.text())[:300]}
                return resp.status, data if isinstance(data, dict) else {"error": str(data)}
        except (TimeoutError, aiohttp.ClientError) as exc:
            return 0, {"outcome": "failed", "error": f"control API unreachable: {_why(exc)}"}


_COMPLETION_AT = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_FINISH_NULL_AT = re.compile(rb'"finish_reason"\s*:\s*null')


def _send_time_trace() -> aiohttp.TraceConfig:
    """Stamp `trace_request_ctx["sent"]` when the request body has been written to the socket."""

    async def on_chunk_sent(_session: Any, ctx: Any, _params: Any) -> None:
        box = ctx.trace_request_ctx
        if isinstance(box, dict):
            box["sent"] = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(on_chunk_sent)
    return trace


class _ServerError(Exception):
    """The server sent an error object inside the stream."""


def _decode(loads: Callable[[bytes], Any], payload: bytes) -> dict[str, Any]:
    event = loads(payload)
    if not isinstance(event, dict):
        raise ValueError(f"unexpected stream event {payload[:80]!r}")
    if "error" in event and not event.get("choices"):
        err = event["error"]
        raise _ServerError(err.get("message", err) if isinstance(err, dict) else err)
    return event


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum each sample name over its label sets (enough for SGLang's counters)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
