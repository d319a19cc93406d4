"""The one client of the control API: an async core (httpx) and a thin sync wrapper.

`launcher switch/status` and `bench run` both use it. Unreachable servers and answers that are not
JSON become RuntimeFailure naming the URL; a switch that cannot reach the API comes back as outcome
`failed` with the reason, so a bench matrix records it and goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from launcher.errors import RuntimeFailure

T = TypeVar("T")
STATUS_TIMEOUT_S = 30.0
URL_FROM = "--url / KIT_CONTROL_URL"  # where `launcher switch/status` take the URL; other callers name theirs


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

    async def status(self, timeout: float | None = None) -> dict[str, Any]:
        data = await self._get("/status", timeout)
        return data if isinstance(data, dict) else {}

    async def profiles(self) -> list[dict[str, Any]]:
        """Name, description and status of every profile the server can switch to."""
        data = await self._get("/profiles")
        return [d for d in data if isinstance(d, dict) and isinstance(d.get("name"), str)] if isinstance(data, list) else []

    async def spec_modes(self) -> list[str]:
        data = await self._get("/specs")
        modes = data.get("spec_modes") if isinstance(data, dict) else None
        return [m for m in modes if isinstance(m, str)] if isinstance(modes, list) else []

    async def running_plan(self) -> dict[str, Any] | None:
        """The plan the server runs now (name, spec, digest, env, argv), or None before the first render."""
        data = await self._get("/plan")
        plan = data.get("plan") if isinstance(data, dict) else None
        return plan if isinstance(plan, dict) else None

    async def switch(self, profile: str, spec: str, timeout_s: float | None) -> tuple[int, dict[str, Any]]:
        """POST /switch; returns (HTTP status, body). The call lasts as long as the switch does."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        body = {"profile": profile, "spec": spec, "timeout_s": timeout_s}
        read = None if timeout_s is None else timeout_s + 120
        try:
            r = await self.http.post(
                f"{self.url}/switch", json=body, headers=headers,
                timeout=httpx.Timeout(read, connect=self.connect_timeout),
            )
        except httpx.HTTPError as exc:
            return 0, {"outcome": "failed", "error": f"control API at {self.url} unreachable: {_why(exc)}"}
        try:
            data = r.json()
        except ValueError:
            data = {"error": r.text[:300]}
        return r.status_code, data if isinstance(data, dict) else {"error": str(data)}


class SyncControlClient:
    """The same calls from synchronous code: each runs the async client in a fresh event loop."""

    def __init__(self, url: str, token: str | None = None, connect_timeout: float = 5.0, *, url_from: str = URL_FROM):
        self.url, self.token, self.connect_timeout, self.url_from = url, token, connect_timeout, url_from

    def _run(self, call: Callable[[ControlClient], Awaitable[T]]) -> T:
        async def go() -> T:
            async with ControlClient(self.url, self.token, self.connect_timeout, url_from=self.url_from) as c:
                return await call(c)

        return asyncio.run(go())

    def status(self, timeout: float | None = None) -> dict[str, Any]:
        return self._run(lambda c: c.status(timeout))

    def profiles(self) -> list[dict[str, Any]]:
        return self._run(lambda c: c.profiles())

    def switch(self, profile: str, spec: str, timeout_s: float | None) -> tuple[int, dict[str, Any]]:
        return self._run(lambda c: c.switch(profile, spec, timeout_s))
