"""`launcher switch` / `launcher status`: talk to the control API of the running server."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import httpx
from rich.console import Console

from launcher.errors import RuntimeFailure, UserError, run_cli

OK_OUTCOMES = {"switched", "unchanged"}


def default_url() -> str:
    host = os.environ.get("KIT_CONTROL_HOST", "127.0.0.1")
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return os.environ.get("KIT_CONTROL_URL") or f"http://{host}:{os.environ.get('KIT_CONTROL_PORT', '30100')}"


def get_status(url: str, timeout: float = 5) -> dict:
    try:
        r = httpx.get(f"{url}/status", timeout=timeout)
    except httpx.HTTPError as exc:
        raise RuntimeFailure(f"control API at {url} is unreachable ({exc.__class__.__name__}); is `launcher serve` running?") from exc
    r.raise_for_status()
    return r.json()


def post_switch(url: str, token: str, profile: str, spec: str, timeout_s: float | None) -> tuple[int, dict]:
    """POST /switch; the call lasts as long as the switch, so the read timeout is open-ended."""
    try:
        r = httpx.post(
            f"{url}/switch",
            json={"profile": profile, "spec": spec, "timeout_s": timeout_s},
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(None, connect=5),
        )
    except httpx.HTTPError as exc:
        raise RuntimeFailure(f"control API at {url} is unreachable ({exc.__class__.__name__})") from exc
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"error": r.text}


def _switch(args: argparse.Namespace) -> int:
    token = os.environ.get("KIT_CONTROL_TOKEN", "")
    if not token:
        raise UserError("KIT_CONTROL_TOKEN is not set; export the token the server was started with")
    console = Console(stderr=True)
    result: dict = {}

    def call() -> None:
        result["resp"] = post_switch(args.url, token, args.profile, args.spec, args.timeout_s)

    worker = threading.Thread(target=call, daemon=True)
    t0 = time.monotonic()
    worker.start()
    with console.status(f"switching to {args.profile} + {args.spec}") as spinner:
        while worker.is_alive():
            worker.join(0.5)
            try:
                phase = get_status(args.url, timeout=2).get("phase") or "…"
            except (RuntimeFailure, httpx.HTTPError):
                phase = "…"
            spinner.update(f"switching to {args.profile} + {args.spec}: {phase} ({time.monotonic() - t0:.1f}s)")
    if "resp" not in result:
        raise RuntimeFailure("switch request failed")
    code, body = result["resp"]
    if code in (400, 401, 403):
        raise UserError(body.get("error", f"HTTP {code}"))
    if code == 409:
        raise RuntimeFailure(body.get("error", "another switch is running"))
    outcome = body.get("outcome")
    total = body.get("durations", {}).get("total_s")
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(f"{outcome}: {args.profile} + {args.spec}" + (f" in {total:.1f}s" if total is not None else ""))
        if body.get("error"):
            print(f"reason: {body['error']}")
        if body.get("rollback_error"):
            print(f"rollback: {body['rollback_error']}")
    return 0 if outcome in OK_OUTCOMES else 1


def _status(args: argparse.Namespace) -> int:
    st = get_status(args.url)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"{st['profile']} + {st['spec']}  state={st['state']}  health={st['health']}  restarts={st['restarts']}  since {st['since_iso']}")
    if st.get("last_error"):
        print(f"last error: {st['last_error']}")
    for h in st.get("history", [])[-5:]:
        frm = (h.get("from") or {}).get("profile")
        to = (h.get("to") or {}).get("profile")
        print(f"  {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(h['ts']))}  {frm} -> {to}: {h['outcome']}" + (f" ({h['error']})" if h.get("error") else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("switch", help="drain, restart with another profile, health-gate, roll back on failure")
    s.add_argument("profile")
    s.add_argument("--spec", default=os.environ.get("SPEC") or "eagle3")
    s.add_argument("--timeout-s", type=float, default=None, help="health-gate timeout for the new profile")
    s.add_argument("--url", default=default_url())
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_switch)
    s = sub.add_parser("status", help="state, health, restarts and recent switches")
    s.add_argument("--url", default=default_url())
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_status)
    args = p.parse_args(argv)
    return run_cli(lambda: args.fn(args))
