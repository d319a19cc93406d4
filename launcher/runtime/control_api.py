"""Control API (supervisord's `control` program): status, profiles, authenticated switch.

The only process that switches profiles; it tracks health and unplanned restarts of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

import httpx
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher import settings
from launcher.errors import KitError, RuntimeFailure, UserError, run_cli
from launcher.profiles.loader import check_name
from launcher.runtime import activation, journal
from launcher.runtime import state as runtime_state
from launcher.runtime.admission import patch_check, validated_plan
from launcher.runtime.supervisor_rpc import Supervisor
from launcher.runtime.switch import DEAD_STATES, GateFailed, Switcher, describe, label

LIVE_STATES = {"RUNNING", "STARTING", "BACKOFF"}
HEALTH_PERIOD_S = 0.25


class SwitchRequest(BaseModel):
    """POST /switch body. timeout_s: a finite number of seconds in (0, SWITCH_TIMEOUT_MAX_S]."""

    model_config = ConfigDict(extra="forbid")
    profile: Annotated[str, Field(strict=True)]
    spec: Annotated[str | None, Field(strict=True)] = None
    timeout_s: Annotated[float | None, Field(strict=True, gt=0, le=settings.SWITCH_TIMEOUT_MAX_S, allow_inf_nan=False)] = None

RUNTIME = web.AppKey("runtime", object)


class Busy(Exception):
    """Another switch holds the lock."""


class Runtime:
    def __init__(self, state_dir: Path, token: str | None):
        self.sd = state_dir
        self.token = token or None
        paths = settings.StatePaths(state_dir)
        self.sup = Supervisor(paths.socket)
        self.switcher = Switcher(state_dir, self.sup)
        self.lock = asyncio.Lock()
        self.current: dict | None = runtime_state.plan_or_none(runtime_state.read_json(paths.profile_json))
        committed = runtime_state.committed(state_dir)
        self.last_good: dict | None = committed["plan"] if committed else None
        self.state = "starting"
        self.since = time.time()
        self.health = "unknown"
        self.health_at: float | None = None
        self.restarts = 0
        self.pid = 0
        self.last_error: str | None = None
        self.backoff_s = settings.RETRY_BACKOFF_S.get()
        self.retry_at: float | None = None
        self.retries = 0
        self.recovery: asyncio.Task | None = None
        self.backends: list[dict] = []  # activation of the running plan's expected backends
        self.backends_of: tuple[int, str | None] | None = None  # (pid, digest) they were read for

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state, self.since = state, time.time()

    def status(self) -> dict:
        cur = self.current or {}
        hist, skipped = runtime_state.read_history(self.sd, 20)
        health = self.health
        if self.health_at is None or self.health_at < self.switcher.server_changed_at:
            health = "unknown"  # no reading of the server that runs now yet
        return {
            "profile": cur.get("name"),
            "spec": cur.get("spec"),
            "digest": cur.get("digest"),
            "state": self.state,
            "phase": self.switcher.phase,
            "since": self.since,
            "since_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)),
            "health": health,
            "health_age_s": None if self.health_at is None else round(time.time() - self.health_at, 3),
            "restarts": self.restarts,
            "retry": {"attempts": self.retries, "next_at": self.retry_at},
            "pid": self.pid,
            "server_url": runtime_state.server_url(cur["flags"]) if cur.get("flags") else None,
            "last_error": self.last_error,
            "patch_check": patch_check(),
            "backends": self.backends,
            "history": hist,
            "history_skipped": skipped,
        }

    def check_backends(self, plan: dict) -> list[dict]:
        """Read the running server's activation lines (activation.py) and keep them for /status."""
        self.backends = activation.check_server(plan.get("expects") or [], settings.StatePaths(self.sd).server_log)
        self.backends_of = (self.pid, plan.get("digest"))
        return self.backends

    async def monitor(self) -> None:
        """Resolve a switch cut short, then watch: health (always, during a switch too), unplanned
        restarts, crash loops; on the first healthy start, commit the running plan."""
        j = journal.read(self.sd)
        if j is not None:
            await self.lock.acquire()  # held from here: no switch and no commit before it is resolved
            self.recovery = asyncio.create_task(self.recover(j))
        async with httpx.AsyncClient(timeout=httpx.Timeout(2, connect=1)) as client:
            while True:
                try:
                    await self._tick(client)
                except Exception:  # a monitor that dies leaves /status stale: report and go on
                    traceback.print_exc()
                await asyncio.sleep(HEALTH_PERIOD_S)

    async def _probe(self, client: httpx.AsyncClient) -> None:
        target = self.switcher.active or self.current
        if not target:
            return
        url = runtime_state.server_url(target["flags"])
        try:
            r = await client.get(f"{url}/health")
            self.health = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except httpx.HTTPError:
            self.health = "down"
        self.health_at = time.time()

    async def _tick(self, client: httpx.AsyncClient) -> None:
        await self._probe(client)
        try:
            info = await asyncio.to_thread(self.sup.info)
        except Exception as exc:
            self.last_error = f"supervisord does not answer: {describe(exc)}"
            return
        pid = int(info.get("pid") or 0)
        if self.lock.locked():
            self.pid = pid
            return
        if pid and self.pid and pid != self.pid:
            self.restarts += 1
        if pid:
            self.pid = pid
        cur = self.current
        if not cur:
            return
        statename = info.get("statename")
        if self.health == "ok" and self.backends_of != (self.pid, cur.get("digest")):
            self.check_backends(cur)  # a server started by serve, or restarted after a crash
        if statename == "FATAL":
            await self._crash_loop(info)
        elif self.health == "ok" and self.state in ("starting", "failed"):
            self.set_state("serving")
            self.last_error = None
            self.retry_at, self.backoff_s = None, settings.RETRY_BACKOFF_S.get()
            if not self.last_good or self.last_good.get("digest") != cur.get("digest"):
                runtime_state.commit(self.sd, cur)
                missing = activation.summary(self.backends)
                runtime_state.append_history(
                    self.sd,
                    {"ts": time.time(), "from": None, "to": label(cur), "outcome": "started", "durations": {},
                     "backends": self.backends, "error": f"expected backend not active: {missing}" if missing else None},
                )
                if missing:
                    self.last_error = f"expected backend not active: {missing}"
                self.last_good = cur
        elif self.state == "starting" and statename in DEAD_STATES:
            self.last_error = f"server did not start ({statename})"
            self.set_state("failed")

    async def _crash_loop(self, info: dict) -> None:
        """supervisord gave up (FATAL): say so in /status, and start the server again with backoff."""
        now = time.time()
        reason = info.get("spawnerr") or f"exit status {info.get('exitstatus')}"
        if self.retry_at is None:
            self.retry_at = now + self.backoff_s
            self.last_error = (f"server crash loop: supervisord gave up after {settings.START_RETRIES.get()} retries "
                               f"(FATAL, {reason}); automatic restart in {self.backoff_s:.0f}s")
            self.set_state("failed")
            return
        if now < self.retry_at:
            return
        self.retries += 1
        self.retry_at = None
        self.backoff_s = min(self.backoff_s * 2, settings.RETRY_BACKOFF_MAX_S.get())
        try:
            await asyncio.to_thread(self.sup.start)
        except Exception as exc:
            self.last_error = f"automatic restart failed: {describe(exc)}"

    async def recover(self, j: journal.Journal) -> dict:
        """Resolve a journal left by a switch that was cut short: gate what runs now, commit it if it is
        healthy, else roll back to the last committed plan. The outcome `interrupted` goes to history.
        The caller holds the lock; it is released here."""
        try:
            return await self._recover(j)
        finally:
            self.lock.release()

    async def _recover(self, j: journal.Journal) -> dict:
        t0 = time.monotonic()
        self.set_state("recovering")
        self.switcher.phase = "recovering"
        entry: dict = {
            "ts": time.time(), "id": j.id, "from": j.record()["from"], "to": j.record()["to"],
            "outcome": "interrupted", "interrupted_phase": j.phase, "durations": {},
            "error": f"the switch was cut short in phase '{j.phase}' (control API or container restart)",
        }
        if j.phase.startswith("done:"):  # it finished, but its outcome could not be written then
            entry.update(finished_as=j.phase[5:], error="the switch finished but its outcome could not be recorded")
        rendered = runtime_state.plan_or_none(runtime_state.read_json(settings.StatePaths(self.sd).profile_json))
        try:
            if rendered is None:
                raise GateFailed("no readable rendered plan (profile.json)")
            self.switcher.active = rendered
            info = await asyncio.to_thread(self.sup.info)
            if info.get("statename") not in LIVE_STATES:
                await asyncio.to_thread(self.sup.start)
            await self.switcher.health_gate(runtime_state.server_url(rendered["flags"]), self.switcher.timeouts.health_s)
            runtime_state.commit(self.sd, rendered)
            self.current = self.last_good = rendered
            self.last_error = None
            entry.update(resolution="kept", running=label(rendered))
            self.set_state("serving")
        except Exception as exc:
            entry["gate_error"] = describe(exc)
            good = self.last_good
            if good is None or (rendered is not None and good.get("digest") == rendered.get("digest")):
                entry.update(resolution="failed")
                self.last_error = entry["gate_error"]
                self.set_state("failed")
            else:
                entry.update(await self.switcher.roll_back(good, None))
                entry["durations"]["rollback_s"] = entry.pop("rollback_s")
                ok = entry["outcome"] == "rolled_back"
                entry.update(outcome="interrupted", resolution="rolled_back" if ok else "failed", running=label(good))
                self.current = good
                self.last_error = entry["gate_error"] if ok else entry.get("rollback_error")
                self.set_state("rolled_back" if ok else "failed")
        self.switcher.phase = None
        entry["durations"]["total_s"] = round(time.monotonic() - t0, 3)
        try:
            runtime_state.append_history(self.sd, entry)
            journal.clear(self.sd)
        except OSError as exc:
            self.last_error = f"recovered, but could not record it: {describe(exc)}"
        try:
            info = await asyncio.to_thread(self.sup.info)
            self.pid = int(info.get("pid") or 0)
        except Exception:
            pass
        return entry

    async def switch(self, profile: str, spec: str, timeout_s: float | None) -> dict:
        if self.lock.locked():
            raise Busy
        plan = (await asyncio.to_thread(validated_plan, profile, spec)).to_json()
        if self.lock.locked():  # another switch started while this one was validating
            raise Busy
        async with self.lock:  # no await between the check and here: one event loop, so atomic
            previous = self.last_good if self.state != "serving" else self.current
            if self.current and plan["digest"] == self.current.get("digest") and self.state == "serving":
                return {"outcome": "unchanged", "error": None, "durations": {}}
            self.set_state("switching")
            try:
                entry = await self.switcher.run(previous, plan, timeout_s)
            except OSError as exc:  # the journal could not be written: nothing was touched
                self.set_state("serving" if self.health == "ok" else "failed")
                raise RuntimeFailure(
                    f"cannot record the switch in {settings.StatePaths(self.sd).journal} ({describe(exc)}); "
                    "nothing was changed: free space in KIT_STATE_DIR and retry"
                ) from exc
            outcome = entry["outcome"]
            if outcome in ("switched", "degraded"):
                self.current = self.last_good = plan
                self.last_error = entry["error"]
                self.set_state("serving" if outcome == "switched" else "degraded")
                self.backends, self.backends_of = entry.get("backends", []), None
            elif outcome == "rolled_back":
                self.current = previous
                self.last_error = entry["error"]
                self.set_state("rolled_back")
            elif outcome == "aborted":
                self.last_error = entry["error"]
                self.set_state("serving")
            else:
                self.current = plan if previous is None else previous
                self.last_error = entry.get("rollback_error") or entry["error"]
                self.set_state("failed")
            info = await asyncio.to_thread(self.sup.info)
            self.pid = int(info.get("pid") or 0)
            return entry


def _authorized(rt: Runtime, request: web.Request) -> web.Response | None:
    if not rt.token:
        return web.json_response({"error": "state-changing calls are disabled: set KIT_CONTROL_TOKEN in the server's environment"}, status=403)
    header = request.headers.get("Authorization", "")
    given = header[7:] if header.startswith("Bearer ") else ""
    # Header bytes that are not UTF-8 arrive as surrogates: compare bytes, never fail on them.
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), rt.token.encode()):
        return web.json_response({"error": "missing or wrong bearer token (Authorization: Bearer $KIT_CONTROL_TOKEN)"}, status=401)
    return None


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(request.app[RUNTIME].status())


async def get_profiles(request: web.Request) -> web.Response:
    from launcher.profiles.loader import describe_all

    return web.json_response(await asyncio.to_thread(describe_all))


async def get_specs(request: web.Request) -> web.Response:
    from launcher.profiles.loader import spec_modes

    return web.json_response({"spec_modes": await asyncio.to_thread(spec_modes), "default": settings.SPEC.get()})


async def get_plan(request: web.Request) -> web.Response:
    """The running plan (name, spec, digest, env, argv, flags): what the bench records per cell."""
    return web.json_response({"plan": request.app[RUNTIME].current})


def _bad_request(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def post_switch(request: web.Request) -> web.Response:
    rt: Runtime = request.app[RUNTIME]
    denied = _authorized(rt, request)
    if denied:
        return denied
    usage = (f'body must be JSON {{"profile": str, "spec": str, "timeout_s": number in (0, {settings.SWITCH_TIMEOUT_MAX_S:.0f}]}}')
    try:
        raw = json.loads(await request.read())
    except (ValueError, RecursionError):
        return _bad_request(f"{usage}; it is not valid JSON")
    try:
        req = SwitchRequest.model_validate(raw)
        profile = check_name("profile", req.profile)
        spec = check_name("spec", req.spec or settings.SPEC.default)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        return _bad_request(f"{usage}; {where}: {err['msg']}")
    except UserError as exc:
        return _bad_request(str(exc))
    try:
        entry = await rt.switch(profile, spec, req.timeout_s)
    except Busy:
        return web.json_response({"error": "another switch is running; retry when /status shows it finished"}, status=409)
    except UserError as exc:
        return _bad_request(str(exc))
    except KitError as exc:  # e.g. a damaged patch record, a full disk: nothing was changed
        return web.json_response({"error": str(exc), "outcome": "failed"}, status=500)
    code = 500 if entry["outcome"] == "failed" else 200
    return web.json_response({**entry, "status": rt.status()}, status=code)


@web.middleware
async def no_tracebacks(request: web.Request, handler):
    """An unexpected error answers one JSON line (the traceback goes to the log, never to the client)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        traceback.print_exc()
        return web.json_response({"error": f"internal error: {type(exc).__name__}"}, status=500)


def make_app(state_dir: Path, token: str | None) -> web.Application:
    app = web.Application(middlewares=[no_tracebacks], client_max_size=64 * 1024)
    rt = Runtime(state_dir, token)
    app[RUNTIME] = rt
    app.router.add_get("/status", get_status)
    app.router.add_get("/profiles", get_profiles)
    app.router.add_get("/specs", get_specs)
    app.router.add_get("/plan", get_plan)
    app.router.add_post("/switch", post_switch)

    async def background(app: web.Application):
        task = asyncio.create_task(rt.monitor())
        from launcher.profiles import sglang_args

        if sglang_args.available():  # build SGLang's parser now, not during the first switch
            asyncio.get_running_loop().run_in_executor(None, sglang_args.parser)
        yield
        task.cancel()

    app.cleanup_ctx.append(background)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.runtime.control_api")
    p.add_argument("--state-dir", default=None)
    args = p.parse_args(argv)

    def body() -> int:
        settings.check(("server", "profile"))  # refuse to start on a bad setting, naming it
        sd = settings.state_paths(args.state_dir).root
        host, port = settings.CONTROL_HOST.get(), settings.CONTROL_PORT.get()
        print(f"control API on http://{host}:{port} (state {sd})", file=sys.stderr, flush=True)
        web.run_app(make_app(sd, settings.CONTROL_TOKEN.get()), host=host, port=port, print=None, handle_signals=True)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
