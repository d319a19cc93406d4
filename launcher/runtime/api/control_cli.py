"""`launcher switch` / `launcher status`: the running server's control API, from a shell."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time

from rich.console import Console

from launcher import settings
from launcher.errors import RuntimeFailure, UserError, run_cli
from launcher.profiles.spec_params import parse as parse_spec_params
from launcher.runtime.api.control_client import ControlClient, SyncControlClient
from launcher.runtime.core.states import OK_OUTCOMES


async def _switch_with_spinner(args: argparse.Namespace, token: str) -> tuple[int, dict]:
    """POST /switch while polling /status for the phase, shown with the elapsed time."""
    console = Console(stderr=True)
    label = f"switching to {_target(args)}"
    async with ControlClient(args.url, token) as client, ControlClient(args.url) as poller:
        call = asyncio.create_task(client.switch(args.profile, args.spec, args.timeout_s, spec_params=args.point))
        t0 = time.monotonic()
        with console.status(label) as spinner:
            while not call.done():
                await asyncio.wait({call}, timeout=0.5)
                phase = "…"
                with contextlib.suppress(RuntimeFailure):
                    phase = (await poller.status(timeout=2)).get("phase") or "…"
                spinner.update(f"{label}: {phase} ({time.monotonic() - t0:.1f}s)")
        return call.result()


def _target(args: argparse.Namespace) -> str:
    """`fused + eagle3`, or `fused + eagle3(1,1,2)` with --spec-params."""
    return f"{args.profile} + {args.spec}{args.point.label() if args.point else ''}"


def _switch(args: argparse.Namespace) -> int:
    token = settings.KIT_CONTROL_TOKEN.get()
    if not token:
        raise UserError(f"{settings.KIT_CONTROL_TOKEN.name} is not set; export the token the server was started with")
    code, body = asyncio.run(_switch_with_spinner(args, token))
    if code == 0:
        raise RuntimeFailure(body.get("error", "control API unreachable"))
    if code in (400, 401, 403):
        raise UserError(body.get("error", f"HTTP {code}"))
    if code == 409:
        raise RuntimeFailure(body.get("error", "another switch is running"))
    outcome = body.get("outcome")
    total = body.get("durations", {}).get("total_s")
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(f"{outcome}: {_target(args)}" + (f" in {total:.1f}s" if total is not None else ""))
        if body.get("error"):
            print(f"reason: {body['error']}")
        if body.get("rollback_error"):
            print(f"rollback: {body['rollback_error']}")
        _print_backends(body.get("backends") or [])
        _print_decode(body.get("decode_allreduce"))
    return 0 if outcome in OK_OUTCOMES else 1


def _print_decode(decode: dict | None) -> None:
    """Which backend carries the decode all-reduce, by SGLang's precedence (activation.assess)."""
    if decode:
        print(f"decode all-reduce: {decode.get('backend') or 'unknown'} ({decode.get('why')})")


def _print_backends(backends: list[dict]) -> None:
    """What the profile expects to run, and the server log's word on it."""
    shown = {True: "active", False: "NOT ACTIVE", None: "unknown"}
    for b in backends:
        verdict = b.get("verdict")
        how = f" - {verdict}" if verdict in ("failed", "superseded", "fell_back") else ""
        print(f"backend {b.get('name')}: {shown.get(b.get('active'), '?')}{how} ({b.get('evidence')})")


def _status(args: argparse.Namespace) -> int:
    st = SyncControlClient(args.url).status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    sp = st.get("spec_params")
    point = f"({sp.get('steps')},{sp.get('topk')},{sp.get('draft_tokens')})" if isinstance(sp, dict) else ""
    print(f"{st.get('profile')} + {st.get('spec')}{point}  state={st.get('state')}  health={st.get('health')}  "
          f"restarts={st.get('restarts')}  since {st.get('since_iso')}")
    if st.get("patch_check") and st["patch_check"] != "enforce":
        print(f"patch check: {st['patch_check']} ({settings.KIT_PATCH_CHECK.name})")
    if st.get("last_error"):
        print(f"last error: {st['last_error']}")
    _print_backends(st.get("backends") or [])
    _print_decode(st.get("decode_allreduce"))
    for h in st.get("history", [])[-5:]:
        frm = (h.get("from") or {}).get("profile")
        to = (h.get("to") or {}).get("profile")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.get("ts") or 0))
        print(f"  {when}  {frm} -> {to}: {h.get('outcome')}" + (f" ({h['error']})" if h.get("error") else ""))
    return 0


def _timeout(value: str) -> float:
    try:
        t = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of seconds") from None
    if not 0 < t < float("inf"):
        raise argparse.ArgumentTypeError(f"'{value}': give a finite number of seconds > 0")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("switch", help="drain, restart with another profile, health-gate, roll back on failure")
    s.add_argument("profile")
    s.add_argument("--spec", default=None, help="default $SPEC, else eagle3")
    s.add_argument("--timeout-s", type=_timeout, default=None, help="health-gate timeout for the new profile")
    s.add_argument("--spec-params", default=None, metavar="S,K,D",
                   help="EAGLE-3 point: steps, top-k, draft tokens (replaces the eagle3 overlay's; e.g. 1,1,2)")
    s.add_argument("--url", default=None, help="default $KIT_CONTROL_URL, else http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_switch)
    s = sub.add_parser("status", help="state, health, restarts and recent switches")
    s.add_argument("--url", default=None, help="default $KIT_CONTROL_URL, else http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_status)
    args = p.parse_args(argv)

    def body() -> int:
        args.url = args.url or settings.control_url()
        if hasattr(args, "spec"):
            args.spec = args.spec or settings.default_spec()
            args.point = parse_spec_params(args.spec_params) if args.spec_params is not None else None
        return args.fn(args)

    return run_cli(body)
