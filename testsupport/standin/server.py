"""HTTP side of the stand-in: SGLang's endpoint subset on aiohttp, every response marked simulated.

Endpoints: /health, /health_generate, /ready, /generate, /v1/chat/completions, /v1/models,
/server_info (and deprecated /get_server_info), /metrics (only with --enable-metrics, as SGLang),
/start_profile, /stop_profile, and the kit-only /debug/env.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from launcher.errors import RuntimeFailure
from testsupport.standin import logprob_shapes, simulation
from testsupport.standin.activation import adaptive_init_line, parse_ranks, startup_lines, write_filler
from testsupport.standin.engine import VERSION, Engine, ProfilingError
from testsupport.standin.metrics import render_metrics

ENGINE_KEY = web.AppKey("engine", Engine)
ENV_PREFIXES = ("NCCL_", "SGLANG_", "KIT_", "CUDA_", "PYTORCH_", "FLASHINFER_", "TORCH_")
SHUTDOWN_TIMEOUT_S = 0.5


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def _error(message: str, status: int = 400) -> web.Response:
    return _json({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)


def _sse(data: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json() if request.can_read_body else {}
    except json.JSONDecodeError as exc:
        raise web.HTTPBadRequest(text=f"request body is not valid JSON: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="request body must be a JSON object")
    return body


def _max_tokens(engine: Engine, value: object, name: str) -> int:
    if value is None:
        return engine.max_tokens(None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise web.HTTPBadRequest(text=f"{name} must be a non-negative integer, got {value!r}")
    return value


def _not_ready() -> web.Response:
    return _error("the server is still starting (SIMULATED stand-in)", 503)


# ----- health --------------------------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not engine.healthy():
        return web.Response(status=503)  # SGLang answers 503 at once while it starts
    if engine.settings.health_delay_s and request.path != "/ready":
        await asyncio.sleep(engine.settings.health_delay_s)  # the one-token generation SGLang runs, then polls for
    return web.Response(status=200 if engine.healthy() else 503)


# ----- native /generate ----------------------------------------------------------------------
def _generate_prompt(body: Mapping[str, Any]) -> str:
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, str):
        return text
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return " ".join(str(i) for i in ids)
    if isinstance(text, list) or isinstance(ids, list):
        raise web.HTTPBadRequest(text="batched requests are not supported by the stand-in; send one prompt")
    raise web.HTTPBadRequest(text='give "text" (a string) or "input_ids" (a list of integers)')


async def generate(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    body = await _read_json(request)
    prompt = _generate_prompt(body)
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise web.HTTPBadRequest(text="sampling_params must be an object")
    n = _max_tokens(engine, params.get("max_new_tokens"), "sampling_params.max_new_tokens")
    if not engine.healthy():
        return _not_ready()
    want_lp, top, with_text = logprob_shapes.generate_request(body)
    want_lp = want_lp and engine.settings.logprobs
    rid, t0 = engine.new_request_id(), time.monotonic()

    def event(chunk: Any) -> dict[str, Any]:
        meta = engine.meta_info(rid, prompt, chunk, n, t0)
        if want_lp:
            meta.update(logprob_shapes.generate_meta(chunk.positions, top, with_text))
        return {"text": simulation.detokenize(chunk.output_ids), "output_ids": list(chunk.output_ids), "meta_info": meta}

    if not body.get("stream"):
        last = None
        async with contextlib.aclosing(engine.generate(prompt, n, stream=False)) as chunks:
            async for chunk in chunks:
                last = chunk
        return _json(event(last))

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        async with contextlib.aclosing(engine.generate(prompt, n)) as chunks:
            async for chunk in chunks:
                await resp.write(_sse(event(chunk)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away; the generator's cleanup already ran
    return resp


# ----- OpenAI chat ---------------------------------------------------------------------------
def _chat_prompt(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise web.HTTPBadRequest(text='"messages" must be a non-empty list')
    lines = []
    for m in messages:
        if not isinstance(m, dict):
            raise web.HTTPBadRequest(text="each message must be an object with role and content")
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role', 'user')}: {content or ''}")
    return "\n".join(lines)


def _chat_chunk(
    rid: str, created: int, model: str, delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }  # no "usage" key: SGLang 0.5.23 leaves it out of every chunk but the last


async def chat_completions(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    body = await _read_json(request)
    prompt = _chat_prompt(body)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    n = _max_tokens(engine, limit, "max_tokens")
    want_lp, top = logprob_shapes.chat_request(body)
    want_lp = want_lp and engine.settings.logprobs
    if not engine.healthy():
        return _not_ready()
    rid, created = engine.new_request_id(), int(time.time())
    model = str(body.get("model") or engine.args.served_model_name)
    prompt_tokens = simulation.prompt_token_count(prompt)

    def usage(completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }

    if not body.get("stream"):
        last = None
        async with contextlib.aclosing(engine.generate(prompt, n, stream=False)) as chunks:
            async for chunk in chunks:
                last = chunk
        assert last is not None
        message = {"role": "assistant", "content": simulation.detokenize(last.output_ids), "tool_calls": None}
        return _json(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "length",
                             "logprobs": logprob_shapes.chat_content(last.positions, top) if want_lp else None}],
                "usage": usage(last.completion_tokens),
            }
        )

    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        completion, last, t0 = 0, None, time.monotonic()
        async with contextlib.aclosing(engine.generate(prompt, n)) as chunks:
            async for chunk in chunks:
                if chunk.index == 0:
                    await resp.write(
                        _sse(_chat_chunk(rid, created, model, {"role": "assistant", "content": ""}, None))
                    )
                delta = {"content": simulation.detokenize(chunk.new_ids)}
                event = _chat_chunk(rid, created, model, delta, None)
                if want_lp:
                    new = chunk.positions[len(chunk.positions) - len(chunk.new_ids):]
                    event["choices"][0]["logprobs"] = logprob_shapes.chat_content(new, top)
                await resp.write(_sse(event))
                completion, last = chunk.completion_tokens, chunk
        # As SGLang 0.5.23 (entrypoints/openai/serving_chat.py around 2641-2764): the finish reason in a chunk
        # of its own with no token, then, when asked (return_spec_tokens_details) and speculation ran, the
        # sglext chunk with no choices, then usage, then [DONE].
        await resp.write(_sse(_chat_chunk(rid, created, model, {}, "length")))
        if body.get("return_spec_tokens_details") is True and last is not None:
            meta = engine.meta_info(rid, prompt, last, n, t0)
            spec = {k: v for k, v in meta.items() if k.startswith("spec_")}
            if spec:
                await resp.write(_sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                                       "model": model, "choices": [], "sglext": {"spec_tokens_details": spec}}))
        if include_usage:
            final = _chat_chunk(rid, created, model, {}, None)
            final["choices"], final["usage"] = [], usage(completion)
            await resp.write(_sse(final))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:
        pass
    return resp


async def models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    entry = {
        "id": engine.args.served_model_name,
        "object": "model",
        "created": int(engine.start_time),
        "owned_by": "sglang",
        "root": engine.args.model_path,
    }
    return _json({"object": "list", "data": [entry]})


# ----- reports -------------------------------------------------------------------------------
async def model_info(request: web.Request) -> web.Response:
    """SGLang's /model_info fields that sglang-router reads when a worker is added (model_path)."""
    engine = request.app[ENGINE_KEY]
    path = engine.args.as_dict().get("model_path")
    return _json({"model_path": path, "served_model_name": path, "tokenizer_path": path,
                  "is_generation": True, "simulated": True})


async def server_info(request: web.Request) -> web.Response:
    """SGLang's server-args fields plus ``simulated`` and the stand-in truth. As SGLang 0.5.23, no start time:
    what changes from one start to the next is ``startup_time`` (phase durations, http_server.py:886) and,
    unless --random-seed pins it, ``random_seed`` (serving_hook.py:660-665)."""
    engine = request.app[ENGINE_KEY]
    info = engine.args.as_dict()
    info.update(
        {
            "max_running_requests": engine.args.resolved_max_running_requests,  # the resolved argument, as SGLang's
            "launch_command": shlex.join([sys.executable, "-m", "testsupport.standin", *sys.argv[1:]]),
            "version": VERSION,
            "simulated": True,
            "startup_time": engine.startup_time,
            "random_seed": engine.args_random_seed,
            "internal_states": [engine.internal_state()],
            "standin": {**engine.settings.model_dump(), "effective_accept_length": engine.accept_length,
                        # generated positions so far by the requests in flight when their pass ran (numerics.py)
                        "positions_by_batch": {str(b): n for b, n in sorted(engine.stats.positions_by_batch.items())}},
        }
    )
    return _json(info)


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not engine.args.enable_metrics:
        raise web.HTTPNotFound(text="/metrics needs --enable-metrics (as in SGLang)")
    s = engine.settings
    if engine.stats.running and s.metrics_busy_delay_s:
        await asyncio.sleep(s.metrics_busy_delay_s)
    if engine.stats.running and s.metrics_busy_status != 200:
        return web.Response(status=s.metrics_busy_status, text="SIMULATED fault: /metrics fails while a request runs")
    return web.Response(text=render_metrics(engine), content_type="text/plain", charset="utf-8")


async def debug_env(request: web.Request) -> web.Response:
    """Kit-only: shows that the profile's environment reached this process."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    return _json({"env": env, "argv": sys.argv[1:], "pid": os.getpid(), "simulated": True})


# ----- profiling -----------------------------------------------------------------------------
async def start_profile(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    body = await _read_json(request)
    try:
        engine.start_profile(body)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from exc
    except ProfilingError as exc:
        return web.Response(status=500, text=f"{exc}\n")
    return web.Response(text="Start profiling.\n")


async def stop_profile(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    try:
        paths = await engine.stop_profile()
    except ProfilingError as exc:
        return web.Response(status=500, text=f"{exc}\n")
    except OSError as exc:
        return web.Response(status=500, text=f"cannot write the simulated trace: {exc}\n")
    print(f"SIMULATED profile written: {', '.join(str(p) for p in paths)}", file=sys.stderr, flush=True)
    return web.Response(text="Stop profiling. This will take some time.\n")


# ----- app and process -----------------------------------------------------------------------
async def _mark_simulated(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Simulated"] = "true"


def build_app(engine: Engine) -> web.Application:
    """The aiohttp application for one engine (tests may also run it in-process)."""
    app = web.Application()
    app[ENGINE_KEY] = engine
    app.on_response_prepare.append(_mark_simulated)
    r = app.router
    for path in ("/health", "/health_generate", "/ready"):
        r.add_get(path, health)
    for method in ("POST", "PUT"):
        r.add_route(method, "/generate", generate)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/v1/models", models)
    r.add_get("/model_info", model_info)
    r.add_get("/get_model_info", model_info)
    r.add_get("/server_info", server_info)
    r.add_get("/get_server_info", server_info)
    r.add_get("/metrics", metrics)
    r.add_get("/debug/env", debug_env)
    for method in ("GET", "POST"):
        r.add_route(method, "/start_profile", start_profile)
        r.add_route(method, "/stop_profile", stop_profile)
    return app


async def _announce_ready(engine: Engine) -> None:
    if engine.settings.fault == "hang_at_start":
        print("SIMULATED fault hang_at_start: /health will answer 503 forever", file=sys.stderr, flush=True)
        return
    await asyncio.sleep(engine.settings.startup_delay_s)
    withhold = {n.strip() for n in engine.settings.withhold_activation.split(",") if n.strip()}
    missing = parse_ranks(engine.settings.activation_missing_ranks)
    for line in startup_lines(engine.args, os.environ, withhold, missing):  # logged before ready, as SGLang does
        print(line, file=sys.stderr, flush=True)
    if engine.adaptive_on:  # the EAGLE worker's init, on TP rank 0 (adaptive_spec_params.py:297-303)
        print(adaptive_init_line(engine.args), file=sys.stderr, flush=True)
    if engine.settings.log_filler_mb:
        write_filler(engine.settings.log_filler_mb)  # blocks the loop: health answers once it is written
    print("SIMULATED: The server is fired up and ready to roll!", file=sys.stderr, flush=True)


async def serve(engine: Engine) -> int:
    """Serve until SIGTERM or SIGINT, then stop within about half a second and return 0."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if sig == signal.SIGTERM and engine.settings.ignore_sigterm:
            signal.signal(sig, signal.SIG_IGN)  # SIMULATED: a server that only SIGKILL stops
            continue
        loop.add_signal_handler(sig, stop.set)
    if engine.settings.load_delay_s:  # SGLang loads the model before it listens: connections are refused
        print(f"SIMULATED: loading the model for {engine.settings.load_delay_s:g} s", file=sys.stderr, flush=True)
        try:
            await asyncio.wait_for(stop.wait(), engine.settings.load_delay_s)
            return 0
        except TimeoutError:
            pass
        engine.start_monotonic = time.monotonic()  # the warm-up (503) starts once it listens
    if engine.settings.crash_while and os.path.exists(engine.settings.crash_while):  # after loading, as SGLang dies
        raise RuntimeFailure(f"SIMULATED crash loop: {engine.settings.crash_while} exists")
    runner = web.AppRunner(build_app(engine), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, engine.args.host, engine.args.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise RuntimeFailure(
            f"cannot listen on {engine.args.host}:{engine.args.port}: {exc.strerror}; pick a free --port"
        ) from exc
    print(
        f"SIMULATED: listening on http://{engine.args.host}:{engine.args.port}", file=sys.stderr, flush=True
    )
    ready = asyncio.create_task(_announce_ready(engine))
    await stop.wait()
    ready.cancel()
    print("SIMULATED: shutting down", file=sys.stderr, flush=True)
    await runner.cleanup()
    return 0
