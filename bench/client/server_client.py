"""Streaming load client for SGLang (native /generate or OpenAI chat).

aiohttp, not httpx: its HTTP parser and stream reader are C-accelerated (llhttp), so reading one
streamed line costs a few microseconds, while httpx's async streaming goes through pure-Python
h11 and anyio layers. The client must stay far below the server's chunk interval (a verify pass
is 10-30 ms); `tools/bench_accuracy.py` measures the CPU cost per chunk.
What each timing means: bench/client/request_record.py. Reading the stream: bench/client/sse_stream.py; the caps
on what a bad server can make it hold: bench/client/capped_body.py; what the bench reads out of /server_info and
a correctness pass's reply: bench/client/server_answers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp

from bench import JsonObject
from bench.client.capped_body import (
    ERROR_BODY_CAP,
    JSON_CAP,
    LINE_CAP,
    BodyTooLarge,
    read_capped,
    read_upto,
    size_text,
)
from bench.client.reply import Reply
from bench.client.request_record import RequestRecord
from bench.client.server_answers import logprob_reply, running_cap
from bench.client.sse_events import MalformedEvent, ServerError, StreamLimit, StreamState
from bench.client.sse_stream import consume
from bench.client.workload import Prompt
from launcher.errors import RuntimeFailure
from launcher.runtime.api.metrics_text import sample_sums

APIS = ("generate", "chat")
READ_BUFSIZE = 4 * 1024 * 1024  # cumulative /generate text grows with the reply; lines can be long
DEFAULT_READ_TIMEOUT_S = 600.0  # --read-timeout: silence before a request is given up
DEFAULT_REQUEST_TIMEOUT_S = 1800.0  # --request-timeout: a whole request, first byte to last
GREEDY = 0.0  # the correctness pass's temperature, whatever --temperature the timed requests use


def token_limit(max_tokens: int) -> int:
    """The most output tokens a request may stream: --max-tokens plus a margin (a speculative
    verify pass may overshoot by its draft length); past it the request fails."""
    return max_tokens + max(16, max_tokens // 10)


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
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        concurrency: int = 64,
        line_cap: int = LINE_CAP,
        error_body_cap: int = ERROR_BODY_CAP,
        temperature: float = GREEDY,
    ):
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}")
        self.temperature = temperature  # the timed requests' (`request`, `run`); `logprobs` is always GREEDY
        self.url = url.rstrip("/")
        self.api = api
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.request_timeout = request_timeout
        self.concurrency = concurrency
        self.line_cap = line_cap
        self.error_body_cap = error_body_cap
        self.model = "default"
        self.incremental_text = False
        self.running_cap: int | None = None  # the server's max_running_requests (`running_cap`), once read
        self._session: aiohttp.ClientSession | None = None
        self._inflight: dict[asyncio.Task[Any], StreamState] = {}
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
        """Cancel requests that received nothing for read_timeout seconds (a hung server) or ran past
        request_timeout in all (a stream that never ends)."""
        period = max(0.05, min(1.0, self.read_timeout / 4, self.request_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.perf_counter()
            for task, state in list(self._inflight.items()):
                if state.timed_out or state.closing:
                    continue
                if now - state.activity > self.read_timeout:
                    state.timed_out = f"no data for {self.read_timeout:g} s (--read-timeout)"
                elif now - state.sent > self.request_timeout:
                    state.timed_out = f"not finished after {self.request_timeout:g} s (--request-timeout)"
                else:
                    continue
                task.cancel()

    # ----- probes ------------------------------------------------------------------------------
    async def health(self, timeout: float | None = None) -> int:
        """HTTP status of /health (503 while starting); raises aiohttp errors when unreachable."""
        t = aiohttp.ClientTimeout(total=timeout or self.connect_timeout + 30, sock_connect=self.connect_timeout)
        async with self.session.get(f"{self.url}/health", timeout=t) as resp:
            with contextlib.suppress(BodyTooLarge):
                await read_capped(resp, ERROR_BODY_CAP, "the /health body")
            return resp.status

    async def preflight(self) -> None:
        """Fail fast (within the connect timeout) when nothing listens at the URL."""
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        try:
            async with self.session.get(f"{self.url}/health", timeout=t) as resp:
                with contextlib.suppress(BodyTooLarge):
                    await read_capped(resp, ERROR_BODY_CAP, "the /health body")
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

    async def get_json(self, path: str) -> JsonObject:
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        async with self.session.get(f"{self.url}{path}", timeout=t) as resp:
            resp.raise_for_status()
            body = await read_capped(resp, JSON_CAP, f"{self.url}{path}")
        try:
            data = json.loads(body)
        except RecursionError as exc:
            raise ValueError(f"{self.url}{path}: JSON nested too deep") from exc
        return data if isinstance(data, dict) else {"value": data}

    async def server_info(self) -> JsonObject:
        """GET /server_info (SGLang 0.5.23), falling back to the deprecated /get_server_info."""
        try:
            return await self.get_json("/server_info")
        except aiohttp.ClientResponseError as exc:
            if exc.status != 404:
                raise
            return await self.get_json("/get_server_info")

    async def metrics_counters(self) -> dict[str, float] | None:
        """Prometheus samples from /metrics, summed over label sets; None when /metrics is off or unreadable."""
        t = aiohttp.ClientTimeout(total=self.connect_timeout + 30, sock_connect=self.connect_timeout)
        try:
            async with self.session.get(f"{self.url}/metrics", timeout=t) as resp:
                if resp.status != 200:
                    return None
                text = (await read_capped(resp, JSON_CAP, "/metrics")).decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ClientError, BodyTooLarge):
            return None
        try:
            return sample_sums(text)
        except ValueError:
            return None

    def configure_from_server_info(self, info: JsonObject) -> None:
        """Model name for the chat API; whether /generate streams incremental or cumulative text; the most
        requests the server runs at once (`running_cap`)."""
        self.model = str(info.get("served_model_name") or info.get("model_path") or "default")
        self.incremental_text = bool(info.get("incremental_streaming_output"))  # the 0.5.23 field (tokenizer_manager.py 543)
        self.running_cap = running_cap(info)

    # ----- one request -------------------------------------------------------------------------
    def _payload(self, prompt: Prompt, temperature: float) -> tuple[str, JsonObject]:
        if self.api == "generate":
            return "/generate", {
                "text": prompt.text(),
                "sampling_params": {
                    "temperature": temperature,
                    "max_new_tokens": self.max_tokens,
                    "ignore_eos": self.ignore_eos,
                },
                "stream": True,
            }
        return "/v1/chat/completions", {
            "model": self.model,
            "messages": prompt.chat_messages(),
            "temperature": temperature,
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_spec_tokens_details": True,
        }

    async def request(self, prompt: Prompt, t_origin: float) -> RequestRecord:
        """Send one streaming request and time every chunk; errors are recorded, never raised."""
        path, payload = self._payload(prompt, self.temperature)
        record = RequestRecord(prompt_id=prompt.id)
        sent = time.perf_counter()
        record.start_s = sent - t_origin
        state = StreamState(record, sent, self.incremental_text, max_tokens=token_limit(self.max_tokens),
                            max_text=self.line_cap)
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
                    record.error = f"HTTP {resp.status}: {await self._error_body(resp)}"
                    return record
                got_done = await consume(resp, state, api=self.api, incremental_text=self.incremental_text,
                                         line_cap=self.line_cap)
                record.e2e_s = state.end - state.sent
        except asyncio.CancelledError:
            if not state.timed_out or task is None:
                raise
            task.uncancel()
            record.error = f"stream broke: {state.timed_out}"
            return record
        except ServerError as exc:
            record.error = f"server error: {exc}"
            return record
        except (MalformedEvent, StreamLimit) as exc:
            record.error = f"bad stream: {exc}"
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

    def _logprob_payload(self, prompt: Prompt, top_k: int) -> tuple[str, JsonObject]:
        """The same request as a measured one but always greedy (temperature GREEDY, whatever `self.temperature`
        the timed requests use: the gate compares deterministic replies), not streamed, asking for every output
        token's log-probability and its top-k alternatives (the correctness pass; never timed)."""
        path, payload = self._payload(prompt, GREEDY)
        payload["stream"] = False
        if self.api == "generate":
            payload.update(return_logprob=True, top_logprobs_num=top_k, logprob_start_len=-1)
        else:
            payload.pop("stream_options", None)
            payload.update(logprobs=True, top_logprobs=top_k)
        return path, payload

    async def logprobs(self, prompt: Prompt, top_k: int, concurrency: int = 1) -> Reply:
        """One greedy reply with its log-probabilities, the raw request and body kept (`Reply`; its rows None
        when the server sent none). RuntimeFailure naming the prompt when the request itself fails."""
        path, payload = self._logprob_payload(prompt, top_k)
        try:
            async with self.session.post(f"{self.url}{path}", json=payload,
                                         timeout=aiohttp.ClientTimeout(total=self.request_timeout)) as resp:
                if resp.status != 200:
                    raise RuntimeFailure(f"prompt {prompt.id}: log-probability request got HTTP {resp.status}: "
                                         f"{await self._error_body(resp)}")
                body, more = await read_upto(resp, self.line_cap)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RuntimeFailure(f"prompt {prompt.id}: log-probability request failed: {_why(exc)}") from exc
        if more:
            raise RuntimeFailure(f"prompt {prompt.id}: log-probability reply over {size_text(self.line_cap)}")
        api = "generate" if self.api == "generate" else "chat"
        return logprob_reply(prompt.id, body, api=api, concurrency=concurrency,
                             request={"path": path, "body": payload})

    async def logprob_pass(self, prompts: Sequence[Prompt], top_k: int, concurrency: int) -> list[Reply]:
        """`logprobs` for every prompt with at most `concurrency` in flight (requests then share the server's
        forward passes, as production's do); one reply per prompt, in prompt order. With fewer prompts than
        `concurrency`, the prompts are sent again until that many are in flight (a batch of that size), and the
        first reply of each prompt is kept."""
        sem = asyncio.Semaphore(concurrency)
        sent = [prompts[i % len(prompts)] for i in range(max(len(prompts), concurrency))] if prompts else []

        async def one(p: Prompt) -> Reply:
            async with sem:
                return await self.logprobs(p, top_k, concurrency)

        return list(await asyncio.gather(*(one(p) for p in sent)))[:len(prompts)]

    async def _error_body(self, resp: aiohttp.ClientResponse) -> str:
        """The first 300 characters of a non-200 body, read no further than error_body_cap."""
        body, more = await read_upto(resp, self.error_body_cap)
        note = f" (body cut at the {size_text(self.error_body_cap)} error body cap)" if more else ""
        return body[:300].decode("utf-8", "replace").strip() + note

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


def _send_time_trace() -> aiohttp.TraceConfig:
    """Stamp `trace_request_ctx["sent"]` when the request body has been written to the socket."""

    async def on_chunk_sent(_session: Any, ctx: Any, _params: Any) -> None:
        box = ctx.trace_request_ctx
        if isinstance(box, dict):
            box["sent"] = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(on_chunk_sent)
    return trace


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
