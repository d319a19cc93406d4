"""The one client of the control API: an async core (httpx) and a thin sync wrapper.

`launcher switch/status`, the fleet and the bench use it. Every answer comes back as its model (bodies.py):
/status a ServerStatus, /plan a Plan, POST and DELETE calls an Answer with the HTTP status (`code`) and the typed
body. A request is built as the server's own model, so one the server would refuse is answered 400 unsent.
Unreachable servers, answers that are not JSON and a /status or /plan of another shape become RuntimeFailure
naming the URL; a switch that cannot reach the API comes back as outcome `failed` with the reason, so a bench
matrix records it and goes on.

Every request is bounded. A switch request lasts as long as the switch on the host, so its default
deadline is that switch's own worst case, from the settings registry (switch_deadline_s); a caller
may pass a shorter total deadline. A switch that does not answer in time comes back as outcome
`failed` with `timed_out` true: the host may still be switching.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from launcher import settings
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.listing import ProfileRow
from launcher.profiles.plan import Plan
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api.bodies import (
    JSON,
    CheckAnswer,
    CheckRequest,
    HoldAnswer,
    HoldRequest,
    PlanAnswer,
    ReleaseAnswer,
    ReleaseRequest,
    ServerStatus,
    SwitchAnswer,
    SwitchRequest,
    problem,
)
from launcher.runtime.core.states import Outcome
from launcher.runtime.records.history import Entry

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
STATUS_TIMEOUT_S = 30.0
# Beyond the switch's own timeouts: a health probe can outlast its gate by one read (30 s), the drain
# probe by 5 s, the activation check takes up to 3 s, supervisord's start call and the network the rest.
SWITCH_MARGIN_S = 60.0
# The switch's STOP_MARGIN_S (launcher/runtime/switch.py; a test keeps them equal): named here, not
# imported, so the client does not load the whole switch (supervisord, profiles) to compute a number.
STOP_MARGIN_S = 30.0
BUSY_STATES = ("switching", "recovering")  # launcher/runtime/core/states.py, named here for the same reason
IDLE_POLL_S = 0.2
URL_FROM = "--url / KIT_CONTROL_URL"  # where `launcher switch/status` take the URL; other callers name theirs


def switch_deadline_s(timeout_s: float | None = None, environ: Mapping[str, str] | None = None) -> float:
    """The longest a switch request can take on a host run with these settings, so a client that
    waits this long has waited for any switch that still ends by itself:

        KIT_DRAIN_TIMEOUT_S + 2 x (KIT_STOP_WAIT_S + STOP_MARGIN_S)      drain; the switch's stop and the rollback's
        + (timeout_s, else KIT_HEALTH_TIMEOUT_S) + KIT_ROLLBACK_TIMEOUT_S  the new plan's gate; the old plan's gate
        + SWITCH_MARGIN_S

    4260 s (71 min) with the defaults. Read from this process's environment: set the same values as
    the host's server, or pass a deadline."""
    stop = float(settings.KIT_STOP_WAIT_S.get(environ) or 0) + STOP_MARGIN_S
    health = timeout_s if timeout_s is not None else float(settings.KIT_HEALTH_TIMEOUT_S.get(environ) or 0)
    return (float(settings.KIT_DRAIN_TIMEOUT_S.get(environ) or 0) + 2 * stop + health
            + float(settings.KIT_ROLLBACK_TIMEOUT_S.get(environ) or 0) + SWITCH_MARGIN_S)


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ControlClient:
    """Async client; use as `async with ControlClient(url, token) as c: await c.status()`.

    `url_from` names where the caller took the URL, so an unreachable API points at the right flag."""

    def __init__(self, url: str, token: str | None = None, connect_timeout: float = 5.0, *, url_from: str = URL_FROM):
        self.url = url.rstrip("/")
        self.url_from = url_from
        self.token = token or None
        self.connect_timeout = connect_timeout
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(STATUS_TIMEOUT_S, connect=connect_timeout))

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _get(self, path: str, timeout: float | None = None) -> Any:
        try:
            r = await self.http.get(f"{self.url}{path}", timeout=timeout or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise RuntimeFailure(
                f"control API at {self.url} is unreachable ({_why(exc)}); is `launcher serve` running? "
                f"check the URL ({self.url_from})"
            ) from exc
        if r.status_code != 200:
            raise RuntimeFailure(f"{self.url}{path} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError as exc:
            raise RuntimeFailure(f"{self.url}{path} did not answer JSON: {r.text[:200]!r}") from exc

    async def status(self, timeout: float | None = None) -> ServerStatus:
        data = await self._get("/status", timeout)
        return self._parsed(ServerStatus, data if isinstance(data, dict) else {}, "/status")

    def _parsed(self, model: type[M], data: object, path: str) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RuntimeFailure(f"{self.url}{path} answered a body of another shape ({problem(exc)}); is the "
                                 f"control API the kit's, of this version? check the URL ({self.url_from})") from exc

    async def profiles(self) -> list[ProfileRow]:
        """Name, description and status of every profile the server can switch to (a row that is not one is left
        out)."""
        data = await self._get("/profiles")
        rows = []
        for d in data if isinstance(data, list) else []:
            with contextlib.suppress(ValidationError):
                rows.append(ProfileRow.model_validate(d))
        return rows

    async def spec_modes(self) -> list[str]:
        data = await self._get("/specs")
        modes = data.get("spec_modes") if isinstance(data, dict) else None
        return [m for m in modes if isinstance(m, str)] if isinstance(modes, list) else []

    async def running_plan(self) -> Plan | None:
        """The plan the server runs now (name, spec, digest, env, argv), or None before the first render."""
        data = await self._get("/plan")
        return self._parsed(PlanAnswer, data if isinstance(data, dict) else {}, "/plan").plan

    async def check(self, profile: str, spec: str, spec_params: SpecParams | Mapping | None = None,
                    adaptive_tiers: AdaptiveTiers | Mapping | None = None) -> CheckAnswer:
        """POST /check: the plan a switch would run, validated as the switch validates it, nothing switched; code
        200 carries `digest` and `plan`, 400 `error`. RuntimeFailure when unreachable."""
        try:
            req = CheckRequest(profile=profile, spec=spec, spec_params=spec_params, adaptive_tiers=adaptive_tiers)
        except (ValidationError, UserError) as exc:
            return CheckAnswer(code=400, error=_refused(exc))
        code, body = await self._send("POST", "/check", req.to_json())
        return CheckAnswer.of(code, body)

    async def hold(self, holder: str, ttl_s: float, hold_id: str | None = None, **where: Any) -> HoldAnswer:
        """POST /hold: take the tune hold (or renew `hold_id`); 200 carries `id`, 409 who holds it. `where`:
        host, pid, take_over_pid (tune_hold.take)."""
        try:
            req = HoldRequest(holder=holder, ttl_s=ttl_s, id=hold_id, **{k: v for k, v in where.items() if v is not None})
        except ValidationError as exc:
            return HoldAnswer(code=400, error=_refused(exc))
        code, body = await self._send("POST", "/hold", req.model_dump(exclude_none=True))
        return HoldAnswer.of(code, body)

    async def release(self, hold_id: str) -> ReleaseAnswer:
        """DELETE /hold: give the tune hold back."""
        code, body = await self._send("DELETE", "/hold", ReleaseRequest(id=hold_id).model_dump())
        return ReleaseAnswer.of(code, body)

    async def _send(self, method: str, path: str, body: JSON) -> tuple[int, object]:
        """An authorized JSON call: (HTTP status, parsed body). RuntimeFailure when unreachable."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            r = await self.http.request(method, f"{self.url}{path}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise RuntimeFailure(f"control API at {self.url} is unreachable ({_why(exc)}); check the URL "
                                 f"({self.url_from})") from exc
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {"error": r.text[:300]}

    async def wait_idle(self, timeout_s: float) -> ServerStatus:
        """/status once no switch holds the server (not switching, not recovering a cut-short one), or
        the last status when `timeout_s` runs out: a caller that was stopped mid-switch, and starts again,
        waits here rather than being refused (HTTP 409) or racing the switch still running."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = await self.status()
            if status.state not in BUSY_STATES or time.monotonic() >= deadline:
                return status
            await asyncio.sleep(IDLE_POLL_S)

    async def switch_when_idle(self, profile: str, spec: str, timeout_s: float | None,
                               spec_params: SpecParams | Mapping | None = None,
                               adaptive_tiers: AdaptiveTiers | Mapping | None = None) -> SwitchAnswer:
        """`switch`, waiting out another switch that holds the server (HTTP 409) for up to the switch's
        own deadline."""
        deadline = time.monotonic() + switch_deadline_s(timeout_s)
        while True:
            answer = await self.switch(profile, spec, timeout_s, spec_params=spec_params, adaptive_tiers=adaptive_tiers)
            if answer.code != 409 or time.monotonic() >= deadline:
                return answer
            await self.wait_idle(max(0.0, deadline - time.monotonic()))

    async def switch(self, profile: str, spec: str, timeout_s: float | None,
                     deadline_s: float | None = None, spec_params: SpecParams | Mapping | None = None,
                     adaptive_tiers: AdaptiveTiers | Mapping | None = None) -> SwitchAnswer:
        """POST /switch. The call lasts as long as the switch does, and at most `deadline_s` in all (default
        switch_deadline_s(timeout_s)): a total, not a per-read timeout, so a server that trickles bytes cannot
        stretch it. `spec_params`: an EAGLE-3 point (a SpecParams or a {"steps", "topk", "draft_tokens"} mapping),
        sent only when given; `adaptive_tiers` ({"B": [steps]}, eagle3-adaptive only) likewise. A body the server
        would refuse is refused here the same way (code 400), unsent."""
        try:
            req = SwitchRequest(profile=profile, spec=spec, timeout_s=timeout_s, spec_params=spec_params,
                                adaptive_tiers=adaptive_tiers)
        except (ValidationError, UserError) as exc:
            return SwitchAnswer(code=400, error=_refused(exc))
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        deadline = switch_deadline_s(timeout_s) if deadline_s is None else deadline_s
        try:
            async with asyncio.timeout(deadline):
                r = await self.http.post(
                    f"{self.url}/switch", json=req.to_json(), headers=headers,
                    timeout=httpx.Timeout(deadline, connect=min(self.connect_timeout, deadline)),
                )
        except (TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout):  # sent: the host may have begun
            return SwitchAnswer(code=0, timed_out=True, deadline_s=deadline, entry=Entry(outcome=Outcome.FAILED),
                                error=f"control API at {self.url} did not answer the switch within {deadline:.0f} s; "
                                      "the host may still be switching (see its /status)")
        except httpx.HTTPError as exc:
            return SwitchAnswer(code=0, entry=Entry(outcome=Outcome.FAILED),
                                error=f"control API at {self.url} unreachable: {_why(exc)}")
        try:
            data: object = r.json()
        except ValueError:
            data = {"error": r.text[:300]}
        return SwitchAnswer.of(r.status_code, data)


def _refused(exc: Exception) -> str:
    """A request the server would refuse (HTTP 400), named as the server names it."""
    why = problem(exc) if isinstance(exc, ValidationError) else str(exc)
    return f"not sent, the control API refuses it: {why}"


class SyncControlClient:
    """The same calls from synchronous code: each runs the async client in a fresh event loop."""

    def __init__(self, url: str, token: str | None = None, connect_timeout: float = 5.0, *, url_from: str = URL_FROM):
        self.url, self.token, self.connect_timeout, self.url_from = url, token, connect_timeout, url_from

    def _run(self, call: Callable[[ControlClient], Awaitable[T]]) -> T:
        async def go() -> T:
            async with ControlClient(self.url, self.token, self.connect_timeout, url_from=self.url_from) as c:
                return await call(c)

        return asyncio.run(go())

    def status(self, timeout: float | None = None) -> ServerStatus:
        return self._run(lambda c: c.status(timeout))

    def profiles(self) -> list[ProfileRow]:
        return self._run(lambda c: c.profiles())

    def running_plan(self) -> Plan | None:
        return self._run(lambda c: c.running_plan())

    def check(self, profile: str, spec: str, spec_params: SpecParams | Mapping | None = None,
              adaptive_tiers: AdaptiveTiers | Mapping | None = None) -> CheckAnswer:
        return self._run(lambda c: c.check(profile, spec, spec_params, adaptive_tiers))

    def switch(self, profile: str, spec: str, timeout_s: float | None,
               deadline_s: float | None = None, spec_params: SpecParams | Mapping | None = None,
               adaptive_tiers: AdaptiveTiers | Mapping | None = None) -> SwitchAnswer:
        return self._run(lambda c: c.switch(profile, spec, timeout_s, deadline_s, spec_params, adaptive_tiers))

    def hold(self, holder: str, ttl_s: float, hold_id: str | None = None, **where: Any) -> HoldAnswer:
        return self._run(lambda c: c.hold(holder, ttl_s, hold_id, **where))

    def release(self, hold_id: str) -> ReleaseAnswer:
        return self._run(lambda c: c.release(hold_id))
