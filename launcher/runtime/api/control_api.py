"""Control API (supervisord's `control` program): the HTTP face of the server's lifecycle.

Routes and the bearer-token check (every body's model is in bodies.py); the lifecycle they report and drive is
lifecycle.py, whose moves transitions.py decides. The only process that switches profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import sys
import time
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel, ValidationError

from launcher import settings, state_layout
from launcher.errors import KitError, UserError, run_cli
from launcher.profiles.loader import check_name
from launcher.runtime import log
from launcher.runtime.api import tune_hold
from launcher.runtime.api.bodies import (
    CheckAnswer,
    CheckRequest,
    HoldRequest,
    PlanAnswer,
    ReleaseRequest,
    SwitchRequest,
    problem,
)
from launcher.runtime.api.metrics import KitCollector
from launcher.runtime.core.states import SWITCH_TIMEOUT_MAX_S as TIMEOUT_MAX
from launcher.runtime.core.states import Outcome
from launcher.runtime.lifecycle import Busy, Lifecycle
from launcher.runtime.process import parent_death
from launcher.runtime.records import state as runtime_state


def _dumps(data: object) -> str:
    """Every answer's JSON: never NaN or Infinity (not JSON; a client's parser refuses them). A value that is not
    finite, wherever it came from, answers null."""
    try:
        return json.dumps(data, allow_nan=False)
    except ValueError:
        return json.dumps(runtime_state.finite(data), allow_nan=False)


def _json(data: object, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
TOKEN = web.AppKey("token", str)  # "" when unset: state-changing calls are refused
METRICS = web.AppKey("metrics", CollectorRegistry)  # the kit's own families only (KitCollector)
METRICS_AUTH = web.AppKey("metrics_auth", bool)  # KIT_METRICS_AUTH: /metrics needs the token too
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what every Prometheus 2.x and 3.x reads


def _authorized(request: web.Request) -> web.Response | None:
    token = request.app[TOKEN]
    if not token:
        return _json({"error": "state-changing calls are disabled: set KIT_CONTROL_TOKEN in the server's environment"}, status=403)
    header = request.headers.get("Authorization", "")
    given = header[7:] if header.startswith("Bearer ") else ""
    # Header bytes that are not UTF-8 arrive as surrogates: compare bytes, never fail on them.
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode()):
        return _json({"error": "missing or wrong bearer token (Authorization: Bearer $KIT_CONTROL_TOKEN)"}, status=401)
    return None


async def get_status(request: web.Request) -> web.Response:
    return _json(request.app[LIFECYCLE].status().to_json())


async def get_metrics(request: web.Request) -> web.Response:
    """The numbers /status shows, in Prometheus text format (launcher/runtime/api/metrics.py). Open unless
    KIT_METRICS_AUTH=1; a family that cannot be built is left out, the scrape still answers 200."""
    if request.app[METRICS_AUTH]:
        denied = _authorized(request)
        if denied:
            return denied
    body = generate_latest(request.app[METRICS])
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def get_profiles(request: web.Request) -> web.Response:
    from launcher.profiles.listing import describe_all

    return _json([row.wire() for row in await asyncio.to_thread(describe_all)])


async def get_specs(request: web.Request) -> web.Response:
    from launcher.profiles.loader import spec_modes

    return _json({"spec_modes": await asyncio.to_thread(spec_modes), "default": settings.default_spec()})


async def get_plan(request: web.Request) -> web.Response:
    """The running plan (name, spec, digest, env, argv, flags): what the bench records per cell."""
    return _json(PlanAnswer(plan=request.app[LIFECYCLE].current).to_json())


def _bad_request(message: str) -> web.Response:
    return _json({"error": message}, status=400)


SPEC_PARAMS_USAGE = ('"spec_params": {"steps": int, "topk": int, "draft_tokens": int} (each >= 1, EAGLE-3 only), '
                     '"adaptive_tiers": {"batch size": [steps, ...]} (eagle3-adaptive only)')


async def _plan_request(request: web.Request, model: type[BaseModel], usage: str):
    """(body, profile, spec) of an authorized POST naming a plan, or the response refusing it."""
    denied = _authorized(request)
    if denied:
        return denied
    try:
        raw = json.loads(await request.read())
    except (ValueError, RecursionError):
        return _bad_request(f"{usage}; it is not valid JSON")
    try:
        req = model.model_validate(raw)
        profile = check_name("profile", req.profile)
        spec = check_name("spec", req.spec or settings.default_spec())
    except ValidationError as exc:
        return _bad_request(f"{usage}; {problem(exc)}")
    except UserError as exc:
        return _bad_request(str(exc))
    return req, profile, spec


async def post_check(request: web.Request) -> web.Response:
    """The plan a switch to (profile, spec, spec_params) would run, validated exactly as the switch
    validates it (rules with the host facts, SGLang's parser where installed, the patch check), without
    touching the server: 200 with the plan and its digest, 400 naming what is wrong. `bench tune` asks
    it for every candidate before its first switch."""
    from launcher.runtime.admission import validated_plan

    parsed = await _plan_request(request, CheckRequest, f'body must be JSON {{"profile": str, "spec": str, '
                                                         f'{SPEC_PARAMS_USAGE}}}')
    if isinstance(parsed, web.Response):
        return parsed
    req, profile, spec = parsed
    try:
        plan = await asyncio.to_thread(validated_plan, profile, spec, req.spec_params, None, req.adaptive_tiers)
    except UserError as exc:
        return _bad_request(str(exc))
    except KitError as exc:  # a damaged patch record: the plan cannot be judged
        return _json({"error": str(exc)}, status=500)
    return _json(CheckAnswer(plan=plan, digest=plan.digest(), warnings=plan.warnings).to_json())


async def post_switch(request: web.Request) -> web.Response:
    rt = request.app[LIFECYCLE]
    usage = (f'body must be JSON {{"profile": str, "spec": str, "timeout_s": number in (0, {TIMEOUT_MAX:.0f}], '
             f'{SPEC_PARAMS_USAGE}}}')
    parsed = await _plan_request(request, SwitchRequest, usage)
    if isinstance(parsed, web.Response):
        return parsed
    req, profile, spec = parsed
    try:
        entry = await rt.switch(profile, spec, req.timeout_s, req.spec_params, req.adaptive_tiers)
    except Busy:
        return _json({"error": "another switch is running; retry when /status shows it finished"}, status=409)
    except UserError as exc:
        return _bad_request(str(exc))
    except KitError as exc:  # e.g. a damaged patch record, a full disk: nothing was changed
        return _json({"error": str(exc), "outcome": "failed"}, status=500)
    code = 500 if entry.outcome in (Outcome.FAILED, Outcome.INTERRUPTED) else 200
    return _json({**entry.to_json(), "status": rt.status().to_json()}, status=code)


async def _body(request: web.Request, model: type[BaseModel], usage: str):
    """An authorized JSON body as `model`, or the response refusing it (401/403/400)."""
    denied = _authorized(request)
    if denied:
        return denied
    try:
        return model.model_validate(json.loads(await request.read()))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            return _bad_request(f"{usage}; {problem(exc)}")
        return _bad_request(f"{usage}; it is not valid JSON")


async def post_hold(request: web.Request) -> web.Response:
    """Take or renew the tune hold: 200 with its id, or 409 naming who holds it (tune_hold.py)."""
    usage = (f'body must be JSON {{"holder": str (1-{tune_hold.HOLDER_MAX} chars), "ttl_s": number in '
             f'[{tune_hold.TTL_MIN_S:.0f}, {tune_hold.TTL_MAX_S:.0f}], "id": str (to renew), "host": str, "pid": int '
             f'(1-{tune_hold.PID_MAX}), '
             f'"take_over_pid": int (a holder of this host whose pid is gone)}}')
    req = await _body(request, HoldRequest, usage)
    if isinstance(req, web.Response):
        return req
    sd = request.app[LIFECYCLE].sd
    try:
        hold = tune_hold.take(sd, req.holder, req.ttl_s, req.id, host=req.host, pid=req.pid,
                              take_over_pid=req.take_over_pid)
    except tune_hold.Held as exc:
        return _json({"error": str(exc), "tune_hold": exc.current.view(exc.now)}, status=409)
    except OSError as exc:
        return _json({"error": f"cannot write the hold: {exc}"}, status=500)
    return _json({"id": hold.id, "expires_at": hold.expires_at, "tune_hold": hold.view(time.time())})


async def delete_hold(request: web.Request) -> web.Response:
    """Give the tune hold back; 200 with `released` false when that id holds nothing (it lapsed)."""
    req = await _body(request, ReleaseRequest, 'body must be JSON {"id": str}')
    if isinstance(req, web.Response):
        return req
    try:
        released = tune_hold.release(request.app[LIFECYCLE].sd, req.id)
    except OSError as exc:
        return _json({"error": f"cannot remove the hold: {exc}"}, status=500)
    return _json({"released": released})


@web.middleware
async def no_tracebacks(request: web.Request, handler):
    """An unexpected error answers one JSON line, 500 (the traceback goes to the log, never to the client; a log
    that cannot be written, supervisord gone, is dropped, never a plain-text 500). aiohttp's own 4xx stay as they are."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        log.exception()
        return _json({"error": f"internal error: {type(exc).__name__}"}, status=500)


def make_app(state_dir: Path, token: str | None, metrics_auth: bool = False,
             lifecycle: Lifecycle | None = None) -> web.Application:
    """The control API's app; `lifecycle` stands in for the state dir's own in tests."""
    app = web.Application(middlewares=[no_tracebacks], client_max_size=64 * 1024)
    rt = lifecycle or Lifecycle(state_dir)
    app[LIFECYCLE] = rt
    app[TOKEN] = token or ""
    app[METRICS] = CollectorRegistry(auto_describe=False)
    app[METRICS].register(KitCollector(rt))
    app[METRICS_AUTH] = metrics_auth
    app.router.add_get("/status", get_status)
    app.router.add_get("/profiles", get_profiles)
    app.router.add_get("/specs", get_specs)
    app.router.add_get("/plan", get_plan)
    app.router.add_get("/metrics", get_metrics)
    app.router.add_post("/switch", post_switch)
    app.router.add_post("/check", post_check)
    app.router.add_post("/hold", post_hold)
    app.router.add_delete("/hold", delete_hold)

    async def background(app: web.Application):
        # SGLang's parser is not built here: serve has stored its verdict on the running plan, and a switch
        # builds it (in a thread) only for a command line never checked on this host (flag_verdicts.py).
        task = asyncio.create_task(rt.monitor())
        yield
        task.cancel()

    app.cleanup_ctx.append(background)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.runtime.api.control_api")
    p.add_argument("--state-dir", default=None)
    args = p.parse_args(argv)

    def body() -> int:
        settings.check(("server", "profile"))  # refuse to start on a bad setting, naming it
        parent_death.tie_to_parent()  # never outlive the supervisord this serves (no orphan driving the next)
        sd = state_layout.state_paths(args.state_dir).root
        host, port = settings.KIT_CONTROL_HOST.get(), settings.KIT_CONTROL_PORT.get()
        print(f"control API on http://{host}:{port} (state {sd})", file=sys.stderr, flush=True)
        app = make_app(sd, settings.KIT_CONTROL_TOKEN.get(), bool(settings.KIT_METRICS_AUTH.get()))
        web.run_app(app, host=host, port=port, print=None, handle_signals=True)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
