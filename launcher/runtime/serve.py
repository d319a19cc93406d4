"""`launcher serve`: the server container's entry point.

Checks every server-side setting, picks the initial plan, renders it, writes supervisord.conf and
replaces itself with supervisord in the foreground, so SIGTERM to this process stops every program
(and their process groups).
"""

from __future__ import annotations

import argparse
import os
import sys

from launcher import atomic, settings, state_layout
from launcher.errors import UserError, run_cli
from launcher.profiles import render
from launcher.profiles.loader import available_names, unknown_profile
from launcher.profiles.plan import Plan
from launcher.runtime.admission import validated_plan
from launcher.runtime.process import owner, supervisor_conf
from launcher.runtime.records import state as runtime_state
from launcher.state_layout import StatePaths


def initial_plan(paths: StatePaths, profile: str | None, spec: str | None) -> Plan:
    """PROFILE/SPEC (and MODEL_OVERLAY) on a fresh start; the last committed plan, whole (profile, spec, EAGLE
    point, model overlay), when the container restarts unchanged. A MODEL_OVERLAY changed since the last
    start is laid over the committed plan instead of its own."""
    overlay_now = settings.MODEL_OVERLAY.get() or ""
    request = {"profile": profile or settings.PROFILE.default, "spec": spec or settings.default_spec(),
               "model_overlay": overlay_now}
    boot = runtime_state.read_json(paths.boot, then="taken as a fresh start") or {}
    overlay_kept = boot.get("model_overlay", overlay_now) == overlay_now  # a boot file from before it was kept: kept
    unchanged = overlay_kept and all(boot.get(k) == request[k] for k in ("profile", "spec"))
    committed = runtime_state.committed(paths.root)
    plan: Plan | None = None
    if committed and (unchanged or profile is None):
        prev = committed.plan
        overlay = (prev.model_overlay or "") if overlay_kept else overlay_now
        point = prev.spec_params if prev.spec_params_from is None else None  # a profile's own table is read again
        where = f"{prev.name} + {prev.spec}" + (point.label() if point else "") + (
            f" + model {overlay}" if overlay else "")
        print(f"serve: container restart, resuming committed plan {where}", file=sys.stderr)
        try:
            plan = validated_plan(prev.name, prev.spec, point, model_overlay=overlay)
        except UserError:
            print("serve: committed plan no longer valid, starting the requested one", file=sys.stderr)
    if plan is None:
        plan = validated_plan(request["profile"], request["spec"], model_overlay=overlay_now)
    atomic.write_json(paths.boot, request, mode=runtime_state.STATE_FILE_MODE)
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher serve", description="run SGLang and the control API under supervisord")
    p.add_argument("--state-dir", default=None, help=f"default ${settings.KIT_STATE_DIR.name} or {settings.KIT_STATE_DIR.default}")
    p.add_argument("--profile", default=None, help="default $PROFILE, else the committed plan, else baseline")
    p.add_argument("--spec", default=None, help=f"default $SPEC, else {settings.SPEC.default}")
    p.add_argument("--dry-run", action="store_true", help="render everything, do not start supervisord")
    args = p.parse_args(argv)

    def body() -> int:
        settings.check(("server", "profile"))  # a bad setting stops here, before anything starts
        profile = args.profile or settings.PROFILE.raw()
        spec = args.spec or settings.SPEC.raw()
        if profile and profile not in available_names():
            raise unknown_profile(profile)
        paths = state_layout.state_paths(args.state_dir)
        paths = StatePaths(paths.root.resolve())
        lock = owner.claim(paths)  # before anything is written; held by supervisord after the exec
        plan = initial_plan(paths, profile, spec)
        conf = supervisor_conf.render(paths)
        render.write_plan(paths.root, plan)
        model = f" + model {plan.model_overlay}" if plan.model_overlay else ""
        print(f"serve: profile {plan.name} + {plan.spec}{model} (digest {plan.digest()}), supervisord config {conf}",
              file=sys.stderr)
        if args.dry_run:
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        cmd = [sys.executable, "-m", "supervisor.supervisord", "-n", "-c", str(conf)]
        owner.hand_over(lock)
        os.execv(cmd[0], cmd)
        return 1  # unreachable

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
