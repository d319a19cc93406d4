"""`launcher serve`: the server container's entry point.

Picks the initial plan, renders it, writes supervisord.conf and replaces itself with supervisord
in the foreground, so SIGTERM to this process stops every program (and their process groups).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from launcher import render, runtime_state, sglang_args, supervisor_conf
from launcher.errors import UserError, run_cli
from launcher.plan import Plan, build_plan
from launcher.profile import unknown_profile


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise UserError(f"{name}={raw!r} is not an integer; set it to a whole number of seconds") from exc


def host_facts():
    path = os.environ.get("KIT_HOST_FACTS")
    if not path:
        return None
    from launcher.hostfacts import load_host_facts

    return load_host_facts(path)


def validated_plan(profile: str, spec: str) -> Plan:
    """Everything a switch or a start checks before touching the running server."""
    from launcher import patch_record

    plan = build_plan(profile, spec, host_facts(), use_parser=sglang_args.available())
    if not os.environ.get("KIT_SERVER_CMD"):
        absent = patch_record.missing(plan.patches)
        if absent:
            raise UserError(
                f"profile '{profile}' needs SGLang patch(es) {', '.join(absent)}, which the installed sglang lacks; "
                "rebuild the server image (`make build`) so patches/apply.py runs"
            )
    return plan


def initial_plan(sd: Path, profile: str | None, spec: str | None) -> Plan:
    """PROFILE/SPEC on a fresh start; the last committed plan when the container restarts unchanged."""
    request = {"profile": profile or "baseline", "spec": spec or "eagle3"}
    boot = runtime_state.read_json(sd / runtime_state.BOOT)
    committed = runtime_state.committed(sd)
    if committed and (boot == request or profile is None):
        prev = committed["plan"]
        print(f"serve: container restart, resuming committed profile {prev['name']} + {prev['spec']}", file=sys.stderr)
        request_used = {"profile": prev["name"], "spec": prev["spec"]}
    else:
        request_used = request
    try:
        plan = validated_plan(request_used["profile"], request_used["spec"])
    except UserError:
        if request_used is request:
            raise
        print("serve: committed profile no longer valid, starting the requested one", file=sys.stderr)
        plan = validated_plan(request["profile"], request["spec"])
    from launcher import atomic

    atomic.write_json(sd / runtime_state.BOOT, request)
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher serve", description="run SGLang and the control API under supervisord")
    p.add_argument("--state-dir", default=None, help="default $KIT_STATE_DIR or /var/lib/kit")
    p.add_argument("--profile", default=os.environ.get("PROFILE") or None)
    p.add_argument("--spec", default=os.environ.get("SPEC") or None)
    p.add_argument("--dry-run", action="store_true", help="render everything, do not start supervisord")
    args = p.parse_args(argv)

    def body() -> int:
        from launcher.profile import available_names

        if args.profile and args.profile not in available_names():
            raise unknown_profile(args.profile)
        sd = runtime_state.state_dir(args.state_dir).resolve()
        sd.mkdir(parents=True, exist_ok=True)
        plan = initial_plan(sd, args.profile, args.spec)
        paths = supervisor_conf.Paths(sd)
        conf = supervisor_conf.render(
            paths,
            stop_wait_s=_int_env("KIT_STOP_WAIT_S", 120),
            start_secs=_int_env("KIT_START_SECS", 5),
            start_retries=_int_env("KIT_START_RETRIES", 3),
        )
        render.render(plan, sd)
        print(f"serve: profile {plan.name} + {plan.spec} (digest {plan.digest()}), supervisord config {conf}", file=sys.stderr)
        if args.dry_run:
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        cmd = [sys.executable, "-m", "supervisor.supervisord", "-n", "-c", str(conf)]
        os.execv(cmd[0], cmd)
        return 1  # unreachable

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
