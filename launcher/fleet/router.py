"""sglang-router in front of the fleet: its command line, and the one client of its worker API.

Facts this rests on (sglang-router 0.3.2, checked on loopback; docs/evidence.md): workers are added with
POST /workers {"url"} (202, queued: listed in GET /workers once their /health answers 200) and removed
with DELETE /workers/{id} (202; gone from the list at once, streams in flight finish). URLs are stored
as given, so the fleet file's normalised spelling is the only one used. The Prometheus exporter binds
0.0.0.0:29000 by default and the router exits at start when that port is taken, so the kit always
passes both; default health checks (every 60 s, 3 failures) leave a dead worker listed for ~3 minutes,
so the kit checks every 5 s.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx

from launcher.errors import RuntimeFailure
from launcher.fleet.fleetfile import Fleet, normalise_url

MODULE = "sglang_router.launch_router"
HEALTH_ARGS = ("--health-check-interval-secs", "5", "--health-failure-threshold", "2",
               "--health-success-threshold", "1")


def argv(fleet: Fleet, extra: list[str] | None = None, python: str = sys.executable) -> list[str]:
    """The router's command line: loopback unless the fleet file says otherwise, round robin (the
    default cache_aware policy sent every short prompt to the first worker), every host's server."""
    return [
        python, "-m", MODULE,
        "--host", fleet.router.host, "--port", str(fleet.router.port),
        "--prometheus-host", fleet.router.prometheus_host, "--prometheus-port", str(fleet.router.prometheus_port),
        "--policy", "round_robin", *HEALTH_ARGS,
        "--worker-urls", *[h.server for h in fleet.host],
        *(extra or []),
    ]


class RouterClient:
    """GET/POST/DELETE against the router's worker API; errors become RuntimeFailure naming the URL."""

    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self.http.request(method, f"{self.url}{path}", **kw)
        except httpx.HTTPError as exc:
            raise RuntimeFailure(f"router at {self.url} is unreachable ({type(exc).__name__}: {exc}); "
                                 "start it with `launcher fleet router` (make fleet-up)") from exc

    def workers(self) -> list[dict[str, Any]]:
        r = self._call("GET", "/workers")
        if r.status_code != 200:
            raise RuntimeFailure(f"{self.url}/workers answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            rows = r.json().get("workers", [])
        except (ValueError, AttributeError) as exc:
            raise RuntimeFailure(f"{self.url}/workers did not answer the worker list: {r.text[:200]!r}") from exc
        return [w for w in rows if isinstance(w, dict) and isinstance(w.get("url"), str)]

    def by_server(self) -> dict[str, dict[str, Any]]:
        """The router's workers keyed by normalised URL (unparseable URLs are not ours: left out)."""
        out = {}
        for w in self.workers():
            try:
                out[normalise_url(w["url"])] = w
            except ValueError:
                continue
        return out

    def find(self, server: str) -> dict[str, Any] | None:
        return self.by_server().get(normalise_url(server))

    def add(self, server: str) -> None:
        r = self._call("POST", "/workers", json={"url": normalise_url(server)})
        if r.status_code not in (200, 201, 202):
            raise RuntimeFailure(f"router refused to add {server}: HTTP {r.status_code} {r.text[:200]}")

    def remove(self, server: str, timeout_s: float = 30.0) -> bool:
        """Take the server out of rotation and wait until the router no longer lists it; False if it
        was not registered."""
        w = self.find(server)
        if w is None:
            return False
        r = self._call("DELETE", f"/workers/{w['id']}")
        if r.status_code not in (200, 202, 404):
            raise RuntimeFailure(f"router refused to remove {server}: HTTP {r.status_code} {r.text[:200]}")
        deadline = time.monotonic() + timeout_s
        while self.find(server) is not None:
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"router still lists {server} {timeout_s:.0f} s after removing it")
            time.sleep(0.2)
        return True

    def wait_healthy(self, server: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            w = self.find(server)
            if w is not None and w.get("is_healthy") is True:
                return w
            if time.monotonic() > deadline:
                state = "not listed" if w is None else "listed but unhealthy"
                raise RuntimeFailure(f"router does not report {server} healthy after {timeout_s:.0f} s ({state})")
            time.sleep(0.3)
