"""`launcher` command line: profiles, show, check, render, serve, switch, status, doctor."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from launcher import __version__, settings
from launcher.errors import UserError, run_cli


def _facts(path: str | None):
    if not path:
        return None
    from launcher.profiles.hostfacts import load_host_facts

    return load_host_facts(path)


def _load_env_file(path: str | None) -> None:
    """Values from a docker-compose style .env, for names the environment does not set (it wins,
    as with compose), so `make show` sees what `make up` will run."""
    if not path:
        return
    from dotenv import dotenv_values

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such env file; create it with `cp .env.example .env` or drop --env-file")
    for key, value in dotenv_values(p).items():
        if value is not None and key not in os.environ:
            os.environ[key] = value


def _spec_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", default=None, help="speculation mode: eagle3, ngram, off (default $SPEC, else eagle3)")


def _spec(args: argparse.Namespace) -> str:
    return args.spec or settings.default_spec()


def _spec_params_arg(p: argparse.ArgumentParser) -> None:
    from launcher.profiles.spec_params import add_argument

    add_argument(p)


def _spec_params(args: argparse.Namespace):
    """The --spec-params point, or None; UserError (exit 2) when malformed."""
    if args.spec_params is None:
        return None
    from launcher.profiles.spec_params import parse

    return parse(args.spec_params)


def _adaptive_tiers_arg(p: argparse.ArgumentParser) -> None:
    from launcher.profiles.adaptive_tiers import FLAG_HELP

    p.add_argument("--adaptive-tiers", default=None, metavar="B:S,...", help=FLAG_HELP)


def _adaptive_tiers(args: argparse.Namespace):
    """The --adaptive-tiers record, or None; UserError (exit 2) when malformed."""
    if args.adaptive_tiers is None:
        return None
    from launcher.profiles.adaptive_tiers import parse

    return parse(args.adaptive_tiers)


def _model_overlay_arg(p: argparse.ArgumentParser, extra: str = "") -> None:
    p.add_argument("--model-overlay", default=None, metavar="NAME",
                   help=f"model overlay laid last (profiles/model/<name>.toml), '' for none{extra} "
                        f"(default ${settings.MODEL_OVERLAY.name}, else none)")


def _combo_label(spec: str, overlay: str | None) -> str:
    return spec + (f" + model {overlay}" if overlay else "")


def cmd_profiles(args: argparse.Namespace) -> int:
    from launcher.profiles.listing import describe_all
    from launcher.profiles.loader import search_dirs

    rows = describe_all()
    if not rows:
        dirs = ", ".join(str(d) for d in search_dirs())
        raise UserError(
            f"no profiles found; searched {dirs}. Set {settings.KIT_BUILTIN_PROFILES_DIR.name} to the folder of "
            f"the kit's profiles/, or add folders with {settings.KIT_PROFILES_DIR.name}"
        )
    if args.json:
        print(json.dumps([r.wire() for r in rows], indent=2))
        return 0
    width = max((len(r.name) for r in rows), default=4)
    for r in rows:  # an invalid file shows why in place of its description
        print(f"{r.name:<{width}}  {r.status:<12}  {r.error or r.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from launcher.profiles import sglang_args
    from launcher.profiles.plan import build_plan, check_environ

    _load_env_file(args.env_file)
    # A preview: an unset MODEL_PATH (or any variable without a default) shows as `<MODEL_PATH>`, as
    # `check` has it, and is named on stderr; `render` and `serve` still refuse it. SGLang's parser
    # takes a placeholder path as it takes any path (it never opens one), so every flag is still checked.
    env = check_environ()
    # The real parser as `check` and `render` use it: show never prints flags SGLang would refuse.
    facts = _facts(args.host_facts)
    plan = build_plan(args.profile, _spec(args), facts, use_parser=sglang_args.available(),
                      model_overlay=args.model_overlay, spec_params=_spec_params(args),
                      adaptive_tiers=_adaptive_tiers(args), environ=env)
    placeholders = sorted(env.used)
    if placeholders:
        print(_placeholder_note(placeholders), file=sys.stderr)
    if args.json:
        print(json.dumps({**plan.to_json(), "placeholders": placeholders}, indent=2))
        return 0
    import shlex

    model = f" + model {plan.model_overlay}" if plan.model_overlay else ""
    print(f"# {plan.name} + spec {plan.spec}{model} ({plan.status}): {plan.description}")
    if plan.spec_params is not None:
        sp = plan.spec_params
        pinned = f" (the profile's [spec_params], {plan.spec_params_from})" if plan.spec_params_from else ""
        print(f"# spec params: steps {sp.steps}, topk {sp.topk}, draft tokens {sp.draft_tokens}{pinned}")
    if plan.adaptive_tiers is not None:
        pinned = f" (the profile's [adaptive_tiers], {plan.adaptive_tiers_from})" if plan.adaptive_tiers_from else ""
        print(f"# adaptive tiers (batch size: steps): {plan.adaptive_tiers.to_json()}{pinned}")
    stand_in = f" (with placeholders for {', '.join(placeholders)}; set them for the real one)" if placeholders else ""
    print(f"# digest {plan.digest()}{stand_in}; from {', '.join(plan.sources)}")
    declared = {k: v for k, v in plan.requires.items() if k != "conditions"}
    if declared:
        print(f"# requires: {json.dumps(declared)}")
    # What the rules could not settle without host facts: each one a warning or a refusal on some hosts.
    # With a facts file, what it lacks (a GPU-less host's file has no GPUs, SM or topology) instead.
    conditions = plan.requires.get("conditions", [])
    if conditions and facts is not None and facts.gaps():
        from launcher.profiles.hostfacts import recipe

        why = " (written where nvidia-smi saw no GPU)" if not facts.gpus else ""
        print(f"# host facts {args.host_facts}: {', '.join(facts.gaps())}{why}; "
              f"run `{recipe(args.host_facts)}` on the GPU host to settle the conditions below")
    for condition in conditions:
        where = f"not settled by {args.host_facts}" if args.host_facts else "host unknown; pass --host-facts"
        print(f"# requires ({where}): {condition}")
    for w in plan.warnings:
        print(f"# warning: {w}")
    for k, v in plan.env.items():
        print(f"export {k}={shlex.quote(v)}")
    print(shlex.join(plan.argv))
    return 0


def _placeholder_note(names: list[str]) -> str:
    """stderr's note on a preview: which values are placeholders and how to set them."""
    shown = ", ".join(f"<{n}>" for n in names)
    sets = " ".join(f"{n}=..." for n in names)
    return (f"note: {shown} {'is a placeholder' if len(names) == 1 else 'are placeholders'} for unset "
            f"{', '.join(names)}: this is a preview, not a command to run; put {sets} in .env "
            f"(cp .env.example .env) or export {'it' if len(names) == 1 else 'them'} "
            f"(`launcher render` and `make up` refuse without {'it' if len(names) == 1 else 'them'})")


def cmd_check(args: argparse.Namespace) -> int:
    from launcher.profiles import sglang_args
    from launcher.profiles.loader import available_names
    from launcher.profiles.plan import check_environ

    every = args.all or not args.profiles
    names = available_names() if every else args.profiles
    point = _spec_params(args)
    tiers = _adaptive_tiers(args)
    specs = _check_specs(args.spec, point, tiers)
    overlays = _check_overlays(args.model_overlay, every)
    combos = [(spec, overlay) for spec in specs for overlay in overlays]
    use_parser = sglang_args.available()
    if args.require_parser and not use_parser:
        raise UserError("sglang is not importable, so flags cannot be checked; install sglang==0.5.23 (see .ci/run)")
    # A profile named on the command line, or a point or tiers a mode cannot take: its error is the answer.
    run = _CheckRun(_facts(args.host_facts), check_environ(), use_parser, point, tiers,
                    strict=not every or point is not None or tiers is not None)
    bad = 0
    for name in names:
        for spec, overlay in combos:
            bad += run.check(name, spec, overlay)
    run.print_warnings(len(combos), "every spec mode and model overlay" if len(overlays) > 1 else "every spec mode")
    shape = f"{len(names)} profile(s) x {len(specs)} spec mode(s)"
    if overlays != [None]:
        shape += f" x {len(overlays)} model overlay(s): {', '.join(o or 'none' for o in overlays)}"
    if point is not None:
        shape += f" at spec params {point.text()}"
    print(f"{len(names) * len(combos) - bad} ok, {bad} invalid ({shape})")
    if run.env.used:
        print(f"note: unset {', '.join(sorted(run.env.used))} checked as placeholders")
    if use_parser:
        print(f"flags checked with SGLang {sglang_args.version()}'s argument parser")
    else:
        print("note: sglang is not importable here; flags were not checked against its parser")
    if bad:
        print(f"{bad} plan(s) invalid", file=sys.stderr)
        return 2
    return 0


def _check_specs(spec: str | None, point, tiers) -> list[str]:
    """The spec modes `check` runs. A point is EAGLE-3's: with --spec-params the default spec mode is eagle3, and
    every mode asked for must run EAGLE (a point for ngram/off is an error naming it, from the plan); tiers are
    eagle3-adaptive's."""
    from launcher.profiles.adaptive_tiers import SPEC_MODE as ADAPTIVE
    from launcher.profiles.loader import spec_modes

    spec_arg = spec or (ADAPTIVE if tiers is not None else "eagle3" if point is not None else "all")
    return spec_modes() if spec_arg == "all" else [spec_arg]


def _check_overlays(model_overlay: str | None, every: bool) -> list[str | None]:
    """The model overlays `check` runs: every profile, every model overlay too (and none); named profiles, the one
    MODEL_OVERLAY names. A wrong name is the answer, not a FAIL per plan; --all checks every overlay but still
    names a wrong MODEL_OVERLAY, which the server would refuse to start with."""
    from launcher.profiles.loader import MODEL_DIR, find_file, model_overlays, unknown_model_overlay
    from launcher.profiles.plan import model_overlay_of

    chosen = model_overlay if model_overlay is not None else ("all" if every else None)
    overlays: list[str | None] = [None, *model_overlays()] if chosen == "all" else [model_overlay_of(chosen, os.environ)]
    asked = [o for o in overlays if o]
    if model_overlay is None and settings.MODEL_OVERLAY.get():
        asked.append(settings.MODEL_OVERLAY.get())
    for overlay in asked:
        if find_file(overlay, MODEL_DIR) is None:
            raise unknown_model_overlay(overlay)
    return overlays


class _CheckRun:
    """The plans of one `launcher check`, checked alike. Each finding is a cause printed once: an error in full
    under the first plan it fails, then by its number ("as above: [1] [2]"); a warning once at the end with the
    plans it applies to."""

    def __init__(self, facts, env, use_parser: bool, point, tiers, strict: bool):
        from launcher.doctor.causes import Causes

        self.facts, self.env, self.use_parser, self.point, self.tiers = facts, env, use_parser, point, tiers
        self.strict = strict  # a plan that cannot be built ends the check (else: its FAIL row, and the next plan)
        self.errors_seen, self.warned = Causes(), Causes()
        self.shown: set[int] = set()

    def check(self, name: str, spec: str, overlay: str | None) -> bool:
        """One plan's row (ok or FAIL, its errors under it); True when the plan is invalid."""
        from launcher.doctor.causes import drop_restated
        from launcher.profiles.plan import evaluate

        label = f"{name} + {_combo_label(spec, overlay)}"
        try:
            plan, findings = evaluate(name, spec, self.facts, environ=self.env, use_parser=self.use_parser,
                                      model_overlay=overlay or "", spec_params=self.point, adaptive_tiers=self.tiers)
        except UserError as exc:
            if self.strict:
                raise
            # --all: one broken file must not hide the others
            print(f"FAIL  {label}")
            _print_errors([self.errors_seen.add("error", "", str(exc), name)], self.shown)
            return True
        # a [requires] refusal another refusal restates (symm-mem's SM and NVLink) is shown once
        errors = [f for f in drop_restated(findings) if f.level in ("error", "ineligible")]
        if plan.spec_params_from and plan.spec_params:  # a point the profile file pins, not the overlay's
            label += f" at spec params {plan.spec_params.text()} ([spec_params] of {plan.spec_params_from})"
        print(f"{'FAIL' if errors else 'ok  '}  {label}")
        _print_errors([self.errors_seen.add(f.level, f.rule, f.render(), name) for f in errors], self.shown)
        for f in findings:
            if f.level == "warning":
                self.warned.add(f.level, f.rule, f.render(), name, _combo_label(spec, overlay))
        return bool(errors)

    def print_warnings(self, combos: int, every_combo: str) -> None:
        """Each warning once, with the plans it applies to."""
        from launcher.doctor.causes import applies_to

        for cause in self.warned:
            print(f"warning: {cause.text}")
            print(f"      for: {applies_to(cause.where, combos, every_combo)}")


def _print_errors(causes: list, shown: set[int]) -> None:
    """A plan's errors under its FAIL line: each in full the first time, then only its number."""
    seen = [c for c in causes if c.number in shown]
    for c in causes:
        if c.number not in shown:
            print(f"      [{c.number}] {c.level}: {c.text}")
            shown.add(c.number)
    if seen:
        print(f"      as above: {' '.join(f'[{c.number}]' for c in seen)}")


def cmd_render(args: argparse.Namespace) -> int:
    from launcher.profiles import sglang_args
    from launcher.profiles.plan import build_plan
    from launcher.profiles.render import write_plan

    # The plan names files in the state dir it is rendered into (the adaptive config), not KIT_STATE_DIR's.
    state_dir = Path(args.state_dir).resolve()
    plan = build_plan(args.profile, _spec(args), _facts(args.host_facts), use_parser=sglang_args.available(),
                      model_overlay=args.model_overlay,
                      environ={**os.environ, settings.KIT_STATE_DIR.name: str(state_dir)})
    path = write_plan(state_dir, plan)
    print(path)
    return 0


def _dispatch(module: str, argv: list[str]) -> int:
    import importlib

    return importlib.import_module(module).main(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launcher", description="SGLang PCIe speculative-decoding kit: launcher")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("profiles", help="list profiles")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_profiles)

    s = sub.add_parser("show", help="print the resolved plan of a profile")
    s.add_argument("profile")
    _spec_arg(s)
    _spec_params_arg(s)
    _adaptive_tiers_arg(s)
    s.add_argument("--host-facts", help="the file `launcher doctor --out FILE` writes")
    s.add_argument("--env-file", help="docker-compose style .env whose values fill unset variables")
    _model_overlay_arg(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("check", help="validate profiles: schema, rules, SGLang's real parser")
    s.add_argument("profiles", nargs="*")
    s.add_argument("--all", action="store_true", help="every profile (default when none is named)")
    s.add_argument("--spec", default=None, help="spec mode to check, or all (default; eagle3 with --spec-params, "
                                                "eagle3-adaptive with --adaptive-tiers)")
    _spec_params_arg(s)
    _adaptive_tiers_arg(s)
    _model_overlay_arg(s, ", or all (the default with --all: none and every overlay)")
    s.add_argument("--host-facts")
    s.add_argument("--require-parser", action="store_true", help="fail when sglang is not importable")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("render", help="write profile.json and the command line into a state dir")
    s.add_argument("profile")
    _spec_arg(s)
    s.add_argument("--state-dir", required=True)
    s.add_argument("--host-facts")
    _model_overlay_arg(s)
    s.set_defaults(fn=cmd_render)

    for name, (_, helptext) in DISPATCHED.items():
        sub.add_parser(name, help=helptext, add_help=False)
    return p


# Commands whose own module parses the rest of the command line.
DISPATCHED = {
    "serve": ("launcher.runtime.serve", "container entry point: supervisord + SGLang + control API"),
    "switch": ("launcher.runtime.api.control_cli", "switch the running server to another profile"),
    "status": ("launcher.runtime.api.control_cli", "show the running server's state"),
    "doctor": ("launcher.doctor.cli", "check this host and which profiles can run on it"),
    "fleet": ("launcher.fleet.cli", "several hosts behind sglang-router: router, status, rolling switch"),
    "settings": ("launcher.settings_docs", "every environment setting the kit reads (--write regenerates the docs)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DISPATCHED:
        module = DISPATCHED[argv[0]][0]
        keep_cmd = argv[0] in ("switch", "status")
        return _dispatch(module, argv if keep_cmd else argv[1:])
    args = build_parser().parse_args(argv)
    return run_cli(lambda: args.fn(args))


if __name__ == "__main__":
    raise SystemExit(main())
