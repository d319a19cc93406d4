"""Control API (supervisord's `control` program): status, profiles, authenticated switch.

The only process that switches profiles; it tracks health and unplanned restarts of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import sys
import time
from pathlib import Path

import httpx
from aiohttp import web

from launcher import settings
from launcher.errors import KitError, UserError, run_cli
from launcher.runtime import state as runtime_state
from launcher.runtime.admission import patch_check, validated_plan
from launcher.runtime.supervisor_rpc import Supervisor
from launcher.runtime.switch import DEAD_STATES, Switcher

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
        self.current: dict | None = runtime_state.read_json(paths.profile_json)
        committed = runtime_state.committed(state_dir)
        self.last_good: dict | None = committed["plan"] if committed else None
        self.state = "starting"
        self.since = time.time()
        self.health = "unknown"
        self.restarts = 0
        self.pid = 0
        self.last_error: str | None = None

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state, self.since = state, time.time()

    def status(self) -> dict:
        cur = self.current or {}
        return {
            "profile": cur.get("name"),
            "spec": cur.get("spec"),
            "digest": cur.get("digest"),
            "state": self.state,
            "phase": self.switcher.phase,
            "since": self.since,
            "since_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)),
            "health": self.health,
            "restarts": self.restarts,
            "pid": self.pid,
            "server_url": runtime_state.server_url(cur["flags"]) if cur.get("flags") else None,
            "last_error": self.last_error,
            "patch_check": patch_check(),
            "history": runtime_state.history(self.sd, 20),
        }

    async def monitor(self) -> None:
        """Health and unplanned restarts; on the first healthy start, commit the running plan."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(5, connect=1)) as client:
            while True:
                await self._tick(client)
                await asyncio.sleep(0.25)

    async def _tick(self, client: httpx.AsyncClient) -> None:
        try:
            info = await asyncio.to_thread(self.sup.info)
        except Exception:
            return
        if self.lock.locked():
            self.pid = int(info.get("pid") or 0)
            return
        pid = int(info.get("pid") or 0)
        if pid and self.pid and pid != self.pid:
            self.restarts += 1
        if pid:
            self.pid = pid
        cur = self.current
        if not cur:
            return
        url = runtime_state.server_url(cur["flags"])
        try:
            r = await client.get(f"{url}/health")
            self.health = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except httpx.HTTPError:
            self.health = "down"
        if self.health == "ok" and self.state in ("starting", "failed") and self.last_error is None:
            self.set_state("serving")
            if not self.last_good or self.last_good.get("digest") != cur.get("digest"):
                runtime_state.commit(self.sd, cur)
                runtime_state.append_history(
                    self.sd, {"ts": time.time(), "from": None, "to": {"profile": cur["name"], "spec": cur["spec"], "digest": cur.get("digest")}, "outcome": "started", "durations": {}, "error": None}
                )
                self.last_good = cur
        elif self.state == "starting" and info.get("statename") in DEAD_STATES:
            self.last_error = f"server did not start ({info.get('statename')})"
            self.set_state("failed")

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
            entry = await self.switcher.run(previous, plan, timeout_s)
            outcome = entry["outcome"]
            if outcome == "switched":
                self.current = self.last_good = plan
                self.last_error = None
                self.set_state("serving")
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
    if not hmac.compare_digest(given.encode(), rt.token.encode()):
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


async def post_switch(request: web.Request) -> web.Response:
    rt: Runtime = request.app[RUNTIME]
    denied = _authorized(rt, request)
    if denied:
        return denied
    try:
        body = await request.json()
        profile = body["profile"]
        spec = body.get("spec") or settings.SPEC.default
        timeout_s = body.get("timeout_s")
        if not isinstance(profile, str) or not isinstance(spec, str):
            raise TypeError
        timeout_s = float(timeout_s) if timeout_s is not None else None
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'body must be JSON {"profile": str, "spec": str, "timeout_s": number}'}, status=400)
    try:
        entry = await rt.switch(profile, spec, timeout_s)
    except Busy:
        return web.json_response({"error": "another switch is running; retry when /status shows it finished"}, status=409)
    except UserError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except KitError as exc:  # e.g. a damaged patch record in the image: nothing was changed
        return web.json_response({"error": str(exc), "outcome": "failed"}, status=500)
    code = 500 if entry["outcome"] == "failed" else 200
    return web.json_response({**entry, "status": rt.status()}, status=code)


def make_app(state_dir: Path, token: str | None) -> web.Application:
    app = web.Application()
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
