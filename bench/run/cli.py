"""`bench run`: measure every (profile, spec) end to end through the control API.

A run that switches takes the measuring hold (bench/control/hold.py: a second bench run or tune is refused) and reads the
plan running before its first switch; whatever happens, production then ends where bench/run/landing.py says:
back on that plan, or on the `--leave-on` cell if it passed the gate, never on a plan the gate called WRONG.

Exit codes: 0 done, 1 runtime failure (server unreachable, production could not be put back, ...), 2 bad input
(unknown profile or spec, bad number: before anything was switched; a `--leave-on` cell that did not pass: after,
with production back on the plan found), 3 the plan found running FAILed the gate in this run (production went
to baseline instead), 130 interrupted (the partial bundle is written with "complete": false).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from bench import args as flags
from bench.args import Command, Given, stop_on_interrupt
from bench.client.workload import choose_prompts
from bench.control.hold import MeasureHold, holder_of
from bench.control.production import PlanRef
from bench.run import correctness, logprob_gate
from bench.run.landing import Landing
from bench.run.matrix import MatrixRun
from bench.run.selection import KEYWORDS, csv, given_name, single_name
from bench.run.settings import RunSettings
from launcher import settings
from launcher.errors import KitError, RuntimeFailure, UserError, run_cli
from launcher.runtime.api.control_client import SyncControlClient


def settings_from(given: Given, argv: list[str]) -> RunSettings:
    """What the run measures (exit 2 on a bad value, naming the flag), as the manifest records it."""
    values = given.checked()
    no_switch = values.get("no_switch", False)
    workload, num_prompts, prompts_sha = choose_prompts(given.prompts, given.num_prompts, RunSettings.num_prompts,
                                                        values.get("workload", RunSettings.workload))
    if not no_switch:  # cells switched to are gated against baseline's; one --no-switch cell has no reference
        correctness.check_workload(num_prompts, values.get("max_tokens", RunSettings.max_tokens),
                                   logprob_gate.thresholds())
    if no_switch:
        values["profiles"] = single_name("--profiles", given.profiles)
        values["specs"] = single_name("--spec", given.specs)
    else:
        for flag, value in (("--profiles", given.profiles), ("--spec", given.specs)):
            if value is not None and not csv(value):
                raise UserError(f"{flag} is empty; give one or more names")
    for flag, value in (("--profiles", values.get("profiles")), ("--spec", values.get("specs"))):
        for name in csv(value):
            if name not in KEYWORDS:
                given_name(flag, name)
    leave_on = given.leave_on
    if leave_on is not None and (no_switch or not leave_on.strip()):
        raise UserError("--leave-on names a cell this run switches to (e.g. fused+eagle3); "
                        + ("drop --no-switch (or --leave-on)" if no_switch else "it is empty"))
    if given.eagle3 is not None and no_switch:
        raise UserError("--eagle3 switches to each point; drop --no-switch (or --eagle3)")
    for flag, value in (("--burstiness", given.burstiness), ("--max-concurrency", given.max_concurrency)):
        if value is not None and given.request_rate is None:
            raise UserError(f"{flag} shapes the open-loop arrivals of --request-rate; give --request-rate R[,R...] "
                            f"(or drop {flag})")
    return RunSettings(**{
        **values, **flags.endpoints(values), "workload": workload, "num_prompts": num_prompts,
        "prompts_sha256": prompts_sha, "leave_on": leave_on.strip() if leave_on else None,
        "control_given": bool(given.control) or settings.KIT_CONTROL_URL.is_set(), "argv": list(argv),
    })


RunArgs = Command(RunSettings, "bench run", (
    "End-to-end bench: switch each profile through the control API, warm up, measure "
    "TTFT, TPOT, chunk gap, tok/s and accept length, gate correctness against `baseline`."), settings_from)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = RunArgs.parse(argv)
    stop_on_interrupt(sigterm=True)  # Ctrl-C and SIGTERM write the partial bundle and put production back
    return run_cli(lambda: run_main(args, argv=argv, console=Console(stderr=True)))


def run_main(args: Given, *, argv: list[str], console: Console) -> int:
    """One host (the URLs given) or each host of `--fleet`."""
    run_settings = args.settings(argv)
    if args.fleet:
        if args.url or args.control:
            raise UserError("--fleet takes each host's server and control API from the fleet file; drop --url/--control")
        return measure_fleet(fleet_file=args.fleet, base=run_settings, console=console)
    token = settings.KIT_CONTROL_TOKEN.get()
    if run_settings.switching and not token:
        raise UserError("switching needs the control token: set KIT_CONTROL_TOKEN (or use --no-switch)")
    return measure(run_settings=run_settings, token=token, console=console)


def measure_fleet(*, fleet_file: str, base: RunSettings, console: Console) -> int:
    """`--fleet`: the same matrix on every host, each labelled with its name; stops at the first error."""
    from launcher.fleet import fleetfile

    fleet = fleetfile.load(fleet_file)
    if base.switching:
        fleetfile.require_tokens(fleet)
    rc = 0
    for host in fleet.host:
        s = replace(base, url=host.server, control=host.control, control_given=True, fleet_host=host.name,
                    out=str(Path(base.out) / host.name))
        console.print(f"fleet host {host.name}: {host.server}")
        rc = measure(run_settings=s, token=host.token(), console=console) or rc
    return rc


def measure(*, run_settings: RunSettings, token: str | None, console: Console) -> int:
    """One matrix into one bundle; when it switches, under the measuring hold and with production put where
    bench/run/landing.py says, also after a failure or Ctrl-C."""
    run = MatrixRun(run_settings, console)
    if not run_settings.switching:
        return _measure(run, token)
    assert run_settings.control is not None
    client = SyncControlClient(run_settings.control, token, run_settings.connect_timeout,
                               url_from="--control / KIT_CONTROL_URL")

    def say(text: str, style: str | None = None) -> None:
        console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)

    with MeasureHold(client, holder_of("bench run", Path(run_settings.out)), say) as run.hold:
        running = client.running_plan()
        start = PlanRef.from_json(running.to_json()) if running is not None else None
        if start is None or not start.name:
            raise RuntimeFailure(f"the control API at {run_settings.control} reports no running plan to go back to "
                                 "(nothing was switched); start the server first (`launcher up`)")
        landing = Landing(run_settings, token, start, say)
        try:
            rc = _measure(run, token)
        except BaseException:
            if run.switched:
                landing.land(run.cells, whole=False)
            raise
        landed = landing.land(run.cells, whole=rc == 0) if run.switched else 0
        return 1 if landed == 1 else (rc or landed)


def _measure(run: MatrixRun, token: str | None) -> int:
    """The matrix into its bundle; on Ctrl-C or a failure the partial bundle says `complete: false`."""
    try:
        path = asyncio.run(run.run(token))
    except KeyboardInterrupt:
        partial = _finish_partial(run, interrupted=True)
        where = f"; partial bundle (complete: false) in {partial}" if partial else ""
        print(f"interrupted{where}", file=sys.stderr)
        return 130
    except KitError as exc:
        partial = _finish_partial(run, stopped_by=str(exc)[:300])
        if partial:
            print(f"partial bundle (complete: false) in {partial}", file=sys.stderr)
        raise
    except Exception as exc:
        _finish_partial(run, stopped_by=f"{type(exc).__name__}: {exc}"[:300])
        raise
    label = "SIMULATED " if run.simulated else ""
    print(f"{label}bench bundle: {path}")
    print(f"{label}summary: {Path(path) / 'summary.md'}")
    return 0


def _finish_partial(run: MatrixRun, interrupted: bool = False, stopped_by: str | None = None) -> Path | None:
    """The partial bundle, whole and marked `complete: false`; when even that fails, no bundle at all."""
    try:
        return run.finish(complete=False, interrupted=interrupted, stopped_by=stopped_by)
    except Exception as exc:
        run.discard()
        print(f"error: the partial bundle could not be written ({type(exc).__name__}: {exc}); removed it",
              file=sys.stderr)
        return None


if __name__ == "__main__":
    raise SystemExit(main())
