"""A hostile SGLang look-alike on 127.0.0.1: it answers what a test or a benchmark tells it to.

The bench must survive any server: huge error bodies, endless streams, lines without an end,
malformed events, names that are paths. Each route's answer is an async function of the request
(or a fixed JSON value); `/health` answers 200 and `/metrics` 404 unless set. The server runs in a
thread with its own event loop, so a test can drive the real bench (in process or as a
subprocess) against it. Never shipped; a test double like the stand-in.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def sse(event: Any) -> bytes:
    """One SSE event carrying `event` as JSON (bytes are sent as they are)."""
    payload = event if isinstance(event, bytes) else json.dumps(event).encode()
    return b"data: " + payload + b"\n\n"


DONE = b"data: [DONE]\n\n"


async def stream(
    request: web.Request, chunks: Iterable[bytes] | AsyncIterator[bytes], status: int = 200,
    content_type: str = "text/event-stream",
) -> web.StreamResponse:
    """Send `chunks` one by one as they come; a client that hangs up ends it quietly."""
    resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
    await resp.prepare(request)
    try:
        if hasattr(chunks, "__aiter__"):
            async for chunk in chunks:  # type: ignore[union-attr]
                await resp.write(chunk)
        else:
            for chunk in chunks:  # type: ignore[union-attr]
                await resp.write(chunk)
        await resp.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        pass
    return resp


async def repeat(block: bytes, total: int) -> AsyncIterator[bytes]:
    """`total` bytes made of `block`, produced as they are sent (never held whole)."""
    sent = 0
    while sent < total:
        piece = block[: total - sent]
        sent += len(piece)
        yield piece


async def forever(make: Callable[[int], bytes], period_s: float = 0.0) -> AsyncIterator[bytes]:
    """make(0), make(1), ... without end, `period_s` apart."""
    i = 0
    while True:
        yield make(i)
        i += 1
        await asyncio.sleep(period_s)


def generate_events(tokens: int, text: str = "ok ") -> list[bytes]:
    """A well-formed cumulative /generate stream of `tokens` tokens, one per event, then [DONE]."""
    events = []
    for n in range(1, tokens + 1):
        finish = {"type": "length"} if n == tokens else None
        events.append(sse({"text": text * n, "meta_info": {"completion_tokens": n, "prompt_tokens": 3,
                                                           "finish_reason": finish}}))
    return [*events, DONE]


class HostileServer:
    """`with HostileServer(generate=handler, server_info={...}) as s: ... s.url`."""

    def __init__(self, routes: dict[str, Handler | Any] | None = None, **named: Handler | Any):
        self.routes: dict[str, Handler | Any] = {"/health": {}, "/server_info": {"version": "hostile"}}
        for name, answer in {**(routes or {}), **named}.items():
            self.routes[name if name.startswith("/") else f"/{name}"] = answer
        self.url = ""
        self.active = 0  # answers in progress
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20)
        for path, answer in self.routes.items():
            app.router.add_route("*", path, self._handler(answer))
        return app

    def _handler(self, answer: Handler | Any) -> Handler:
        async def counted(request: web.Request) -> web.StreamResponse:
            self.active += 1
            try:
                return await answer(request) if callable(answer) else web.json_response(answer)
            finally:
                self.active -= 1

        return counted

    def idle(self) -> bool:
        """No answer is being sent now (every client has been answered or has hung up)."""
        return self.active == 0

    def __enter__(self) -> HostileServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def start() -> None:
            self._runner = web.AppRunner(self._app(), handle_signals=False, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            host, port = self._runner.addresses[0][:2]
            self.url = f"http://{host}:{port}"

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(start())
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=main, name="hostile-server", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
