"""`launcher fleet router|status|switch --fleet FILE`: several hosts behind sglang-router."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from launcher import settings
from launcher.errors import RuntimeFailure, UserError, run_cli
from launcher.fleet import fleetfile, rolling
from launcher.fleet import router as router_mod
from launcher.profiles import adaptive_tiers
from launcher.profiles import spec_params as spec_params_mod
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.api.control_client import SyncControlClient
from launcher.runtime.core.states import SWITCH_TIMEOUT_MAX_S


def cmd_router(args: argparse.Namespace) -> int:
    fleet = fleetfile.load(args.fleet)
    cmd = router_mod.argv(fleet, args.extra)
    if args.print:
        print(" ".join(cmd))
        return 0
    if importlib.util.find_spec("sglang_router") is None:
        raise UserError("sglang-router is not installed; pip install 'sglang-router>=0.3.2,<0.4'")
    for host, port, what in ((fleet.router.host, fleet.router.port, "router.url"),
                             (fleet.router.prometheus_host, fleet.router.prometheus_port, "router.prometheus")):
        _port_free(host, port, f"{args.fleet}: key '{what}'")
    print(f"sglang-router on {fleet.router.url} for {len(fleet.host)} host(s): {' '.join(cmd)}", flush=True)
    os.execvp(cmd[0], cmd)  # the router is this process from here on (supervisord/compose manage it)
    return 1


def _port_free(host: str, port: int, where: str) -> None:
    """The router exits with a Rust panic when a port is taken; say it in one line first.

    Binds as the router does (SO_REUSEADDR), so connections of a router that just ended, still in
    TIME_WAIT, do not refuse a restart the router itself would accept; a listener still refuses."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise RuntimeFailure(f"{where}: {host}:{port} is not free ({exc.strerror}); stop what holds it or "
                                 "choose another port in the fleet file") from exc


def cmd_status(args: argparse.Namespace) -> int:
    fleet = fleetfile.load(args.fleet)
    try:
        with router_mod.RouterClient(fleet.router.url) as r:
            listed = r.by_server()
        router_error = None
    except RuntimeFailure as exc:
        listed, router_error = {}, str(exc)
    rows = []
    for h in fleet.host:
        try:
            st = SyncControlClient(h.control, h.token(), url_from=h.url_from()).status()
            error = None
        except RuntimeFailure as exc:
            st, error = ServerStatus(), str(exc)
        w = listed.get(h.server)  # the fleet file's URLs are normalised already
        rows.append({
            "name": h.name, "server": h.server, "control": h.control,
            "profile": st.profile, "spec": st.spec,
            "spec_params": st.spec_params.model_dump() if st.spec_params else None,
            "state": st.state,
            "backends": st.backends, "error": error,
            "router": None if router_error else {"listed": w is not None, "healthy": bool(w and w.get("is_healthy"))},
        })
    report = {"router": {"url": fleet.router.url, "error": router_error}, "hosts": rows}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"router {fleet.router.url}: {'unreachable: ' + router_error if router_error else 'up'}")
        for row in rows:
            where = "-" if row["router"] is None else ("in router, healthy" if row["router"]["healthy"]
                                                        else "in router, unhealthy" if row["router"]["listed"]
                                                        else "not in router")
            what = row["error"] or f"{_running(row)} {row['state']}"
            print(f"  {row['name']:<16} {what:<40} {where}")
            for b in row["backends"]:
                active = {True: "active", False: "NOT ACTIVE", None: "unknown"}[b.get("active")]
                print(f"  {'':<16}   backend {b.get('name')}: {active}")
    bad = router_error or any(r["error"] for r in rows)
    return 1 if bad else 0


def _running(row: dict) -> str:
    """`fused + eagle3`, or `fused + eagle3(1,1,2)` when the host's /status names its EAGLE point."""
    try:
        point = spec_params_mod.coerce(row["spec_params"]) if isinstance(row["spec_params"], dict) else None
    except UserError:  # a point this kit cannot read: name profile and spec only
        point = None
    return f"{row['profile']} + {row['spec']}{point.label() if point else ''}"


def _point(text: str | None) -> spec_params_mod.SpecParams | None:
    """--spec-params S,K,D, or None; UserError (exit 2) naming the flag for a malformed point or one
    SGLang would not run as given, before any host is touched."""
    return spec_params_mod.parse(text, spec_params_mod.FLAG) if text is not None else None


def cmd_switch(args: argparse.Namespace) -> int:
    point = _point(args.spec_params)
    tiers = adaptive_tiers.parse(args.adaptive_tiers) if args.adaptive_tiers is not None else None
    fleet = fleetfile.load(args.fleet)
    spec = args.spec or settings.default_spec()
    history = Path(args.history) if args.history else rolling.default_history(Path(args.fleet))
    with _signals_interrupt():
        try:
            return rolling.switch(fleet, args.profile, spec, history, timeout_s=args.timeout, spec_params=point,
                                  adaptive_tiers=tiers)
        except rolling.Interrupted as exc:
            print(f"interrupted by {signal.Signals(exc.signum).name}; the fleet history records where it stopped",
                  file=sys.stderr)
            return 128 + exc.signum


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM become rolling.Interrupted, so the host taken out of the router is put back
    (and recorded) before the CLI exits; without this SIGTERM would end the process where it stands."""
    def raise_interrupted(signum: int, _frame: object) -> None:
        raise rolling.Interrupted(signum)

    previous = {sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _switch_timeout(raw: str) -> float:
    """--timeout: what the control API accepts as a health-gate timeout, so it is refused here, not per host."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 < value <= SWITCH_TIMEOUT_MAX_S):  # also NaN and infinities
        raise argparse.ArgumentTypeError(f"{raw!r}: give seconds in (0, {SWITCH_TIMEOUT_MAX_S:.0f}]")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launcher fleet", description="several hosts behind sglang-router")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("router", help="run sglang-router in front of every host's server (foreground)")
    s.add_argument("--fleet", required=True)
    s.add_argument("--print", action="store_true", help="print the router's command line and exit")
    s.add_argument("extra", nargs="*", help="more sglang-router flags, after --")
    s.set_defaults(fn=cmd_router)
    s = sub.add_parser("status", help="each host's profile, spec, state and backends, and the router's view")
    s.add_argument("--fleet", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)
    s = sub.add_parser("switch", help="switch every host to PROFILE, one at a time, out of the router")
    s.add_argument("--fleet", required=True)
    s.add_argument("profile")
    s.add_argument("--spec", default=None, help="spec mode (default $SPEC, else eagle3)")
    s.add_argument("--timeout", type=_switch_timeout, default=None,
                   help="seconds each host's switch may take in all (also its health-gate timeout); default: "
                        "the switch's own worst case from KIT_DRAIN_TIMEOUT_S, KIT_STOP_WAIT_S, "
                        "KIT_HEALTH_TIMEOUT_S and KIT_ROLLBACK_TIMEOUT_S (docs/fleet.md)")
    s.add_argument("--spec-params", default=None, metavar="S,K,D",
                   help="EAGLE-3 point for every host: steps, top-k, draft tokens (replaces the eagle3 overlay's; "
                        "e.g. 1,1,2); a host on PROFILE + SPEC but another point is switched too")
    s.add_argument("--adaptive-tiers", default=None, metavar="B:S,...",
                   help=adaptive_tiers.FLAG_HELP + "; a host on PROFILE + SPEC with other tiers is switched too")
    s.add_argument("--history", default=None, help="fleet history file (default: <fleet file>.history.jsonl)")
    s.set_defaults(fn=cmd_switch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_cli(lambda: args.fn(args))


if __name__ == "__main__":
    raise SystemExit(main())
