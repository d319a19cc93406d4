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
from launcher.profiles import spec_params
from launcher.profiles.spec_params import parse as parse_spec_params
from launcher.runtime.api.bodies import SwitchAnswer
from launcher.runtime.api.control_client import ControlClient, SyncControlClient
from launcher.runtime.core.states import OK_OUTCOMES
from launcher.runtime.records.history import Entry


async def _switch_with_spinner(args: argparse.Namespace, token: str) -> SwitchAnswer:
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
                    phase = (await poller.status(timeout=2)).phase or "…"
                spinner.update(f"{label}: {phase} ({time.monotonic() - t0:.1f}s)")
        return call.result()


def _target(args: argparse.Namespace) -> str:
    """`fused + eagle3`, or `fused + eagle3(1,1,2)` with --spec-params."""
    return f"{args.profile} + {args.spec}{args.point.label() if args.point else ''}"


def _switch(args: argparse.Namespace) -> int:
    token = settings.KIT_CONTROL_TOKEN.get()
    if not token:
        raise UserError(f"{settings.KIT_CONTROL_TOKEN.name} is not set; export the token the server was started with")
    answer = asyncio.run(_switch_with_spinner(args, token))
    code = answer.code
    if code == 0:
        raise RuntimeFailure(answer.error or "control API unreachable")
    if code in (400, 401, 403):
        raise UserError(answer.error or f"HTTP {code}")
    if code == 409:
        raise RuntimeFailure(answer.error or "another switch is running")
    entry = answer.entry or Entry()
    outcome = entry.outcome
    total = entry.durations.get("total_s")
    if args.json:
        print(json.dumps(answer.to_json(), indent=2))
    else:
        print(f"{outcome}: {_target(args)}" + (f" in {total:.1f}s" if total is not None else ""))
        if answer.error:
            print(f"reason: {answer.error}")
        if entry.rollback_error:
            print(f"rollback: {entry.rollback_error}")
        _print_backends(entry.backends or [])
        _print_decode(entry.decode_allreduce)
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
        print(json.dumps(st.to_json(), indent=2))
        return 0
    sp = st.spec_params
    point = f"({sp.steps},{sp.topk},{sp.draft_tokens})" if sp else ""
    print(f"{st.profile} + {st.spec}{point}  state={st.state}  health={st.health}  "
          f"restarts={st.restarts}  since {st.since_iso}")
    if st.patch_check and st.patch_check != "enforce":
        print(f"patch check: {st.patch_check} ({settings.KIT_PATCH_CHECK.name})")
    if st.last_error:
        print(f"last error: {st.last_error}")
    _print_backends(st.backends)
    _print_decode(st.decode_allreduce)
    for h in st.history[-5:]:
        frm = h.from_.profile if h.from_ else None
        to = h.to.profile if h.to else None
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.ts or 0))
        print(f"  {when}  {frm} -> {to}: {h.outcome}" + (f" ({h.error})" if h.error else ""))
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
    spec_params.add_argument(s)
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
