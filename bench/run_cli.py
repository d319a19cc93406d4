"""`bench run`: measure every (profile, spec) end to end through the control API.

Exit codes: 0 done, 1 runtime failure (server unreachable, ...), 2 bad input (unknown profile or
spec, bad number) before anything was switched, 130 interrupted (the partial bundle is written
with "complete": false).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from rich.console import Console

from bench.client import APIS
from bench.matrix import MatrixRun, RunSettings
from bench.workload import WORKLOADS
from launcher.errors import KitError, UserError, run_cli

DEFAULT_OUT = "results"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _positive_ints(flag: str, value: str) -> list[int]:
    try:
        nums = [int(v) for v in _csv(value)]
    except ValueError as exc:
        raise UserError(f"{flag} '{value}': give whole numbers separated by commas, e.g. {flag} 1,4,16") from exc
    if not nums or any(n < 1 for n in nums):
        raise UserError(f"{flag} '{value}': every value must be at least 1")
    return nums


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench run",
        description="End-to-end bench: switch each profile through the control API, warm up, measure "
        "TTFT, TPOT, chunk gap, tok/s and accept length, gate correctness against `baseline`.",
    )
    p.add_argument("--url", default=os.environ.get("KIT_SERVER_URL", "http://127.0.0.1:30000"),
                   help="SGLang server URL (default $KIT_SERVER_URL or http://127.0.0.1:30000)")
    p.add_argument("--control", default=None,
                   help="control API URL (default: $KIT_CONTROL_URL or http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT "
                        "when switching; with --no-switch only if given)")
    p.add_argument("--profiles", default="stable",
                   help="comma-separated profile names, 'stable' (every stable profile) or 'all' (default stable)")
    p.add_argument("--spec", default="eagle3,off", help="comma-separated spec modes (default eagle3,off)")
    p.add_argument("--repeats", type=int, default=3, help="measured repeats per concurrency level (default 3)")
    p.add_argument("--concurrency", default="1", help="comma-separated concurrency levels (default 1)")
    p.add_argument("--num-prompts", type=int, default=16, help="requests per repeat (default 16)")
    p.add_argument("--max-tokens", type=int, default=256, help="max new tokens per request (default 256)")
    p.add_argument("--workload", choices=WORKLOADS, default="chat",
                   help="bundled chat-templated prompts (default) or seeded random words")
    p.add_argument("--api", choices=APIS, default="generate",
                   help="SGLang native /generate (default; per-request spec_verify_ct) or OpenAI chat")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
    p.add_argument("--warmup", type=int, default=2, help="uncounted warm-up requests after each switch (default 2)")
    p.add_argument("--no-switch", action="store_true", help="bench whatever is running; do not switch")
    p.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to wait for a connection (default 5)")
    p.add_argument("--switch-timeout", type=float, default=1800.0,
                   help="seconds a switch (restart + health gate) may take (default 1800)")
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for /health after a switch or restart (default 600)")
    p.add_argument("--min-exact-match", type=float, default=0.9,
                   help="correctness gate: least share of outputs identical to baseline's (default 0.9)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the random workload (default 1234)")
    p.add_argument("--out", default=DEFAULT_OUT, help="results folder; the bundle goes to OUT/<run-id>/ (default results)")
    return p


def resolve_profiles(value: str) -> list[str]:
    """Names, or the keywords 'stable' / 'all'; unknown names are a user error (exit 2)."""
    from launcher.profile import available_names, describe_all, unknown_profile

    names = _csv(value)
    if not names:
        raise UserError("--profiles is empty; give names, 'stable' or 'all'")
    if names == ["all"]:
        return available_names()
    if names == ["stable"]:
        return [d["name"] for d in describe_all() if d["status"] == "stable"]
    known = set(available_names())
    for n in names:
        if n not in known:
            raise unknown_profile(n)
    return list(dict.fromkeys(names))


def resolve_specs(value: str) -> list[str]:
    from launcher.profile import spec_modes

    modes = spec_modes()
    specs = _csv(value)
    if not specs:
        raise UserError(f"--spec is empty; give one or more of {', '.join(modes)}")
    for sp in specs:
        if sp not in modes:
            raise UserError(f"unknown spec mode '{sp}' in --spec; known: {', '.join(modes)}")
    return list(dict.fromkeys(specs))


def settings_from_args(args: argparse.Namespace, argv: list[str]) -> RunSettings:
    for flag, v in (("--repeats", args.repeats), ("--num-prompts", args.num_prompts), ("--max-tokens", args.max_tokens)):
        if v < 1:
            raise UserError(f"{flag} {v}: must be at least 1")
    if args.warmup < 0:
        raise UserError("--warmup must be 0 or more")
    if not 0.0 <= args.min_exact_match <= 1.0:
        raise UserError("--min-exact-match must be between 0 and 1")
    if args.connect_timeout <= 0:
        raise UserError("--connect-timeout must be positive")
    concurrency = _positive_ints("--concurrency", args.concurrency)
    if args.no_switch:
        profiles, specs = [], []
        control = args.control
    else:
        profiles = resolve_profiles(args.profiles)
        specs = resolve_specs(args.spec)
        from launcher.control_client import default_url

        control = args.control or default_url()
    if not args.url.startswith(("http://", "https://")):
        raise UserError(f"--url '{args.url}': give an http(s) URL such as http://127.0.0.1:30000")
    return RunSettings(
        url=args.url.rstrip("/"),
        out=args.out,
        profiles=profiles,
        specs=specs,
        control=control.rstrip("/") if control else None,
        repeats=args.repeats,
        concurrency=concurrency,
        num_prompts=args.num_prompts,
        max_tokens=args.max_tokens,
        workload=args.workload,
        api=args.api,
        ignore_eos=args.ignore_eos,
        warmup=args.warmup,
        no_switch=args.no_switch,
        connect_timeout=args.connect_timeout,
        switch_timeout=args.switch_timeout,
        health_timeout=args.health_timeout,
        min_exact_match=args.min_exact_match,
        seed=args.seed,
        argv=list(argv),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    console = Console(stderr=True)

    def body() -> int:
        settings = settings_from_args(args, argv)
        token = os.environ.get("KIT_CONTROL_TOKEN") or None
        if not settings.no_switch and not token:
            raise UserError("switching needs the control token: set KIT_CONTROL_TOKEN (or use --no-switch)")
        run = MatrixRun(settings, console)
        try:
            path = asyncio.run(run.run(token))
        except KeyboardInterrupt:
            partial = run.finish(complete=False, interrupted=True)
            where = f"; partial bundle (complete: false) in {partial}" if partial else ""
            print(f"interrupted{where}", file=sys.stderr)
            return 130
        except KitError:
            partial = run.finish(complete=False)
            if partial:
                print(f"partial bundle (complete: false) in {partial}", file=sys.stderr)
            raise
        label = "SIMULATED " if run.simulated else ""
        print(f"{label}bench bundle: {path}")
        print(f"{label}summary: {Path(path) / 'summary.md'}")
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
