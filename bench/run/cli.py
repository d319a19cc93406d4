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

import argparse
import asyncio
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar

from rich.console import Console

from bench import args as flags
from bench.args import CliArgs, TargetArgs, http_url, positive_ints, stop_on_interrupt, temperature
from bench.client.workload import choose_prompts
from bench.control.hold import MeasureHold, holder_of
from bench.run import correctness, logprob_gate
from bench.run.landing import Landing
from bench.run.matrix import MatrixRun
from bench.run.selection import KEYWORDS, csv, given_name, single_name
from bench.run.settings import RunKnobs, RunSettings
from launcher import settings
from launcher.errors import KitError, RuntimeFailure, UserError, run_cli
from launcher.profiles.spec_params import parse_list
from launcher.runtime.api.control_client import SyncControlClient

DEFAULT_OUT = "results"


@dataclass(kw_only=True)
class RunArgs(CliArgs, TargetArgs, RunKnobs):
    """The flags as given; `settings()` checks them and resolves URLs from the environment."""

    prog: ClassVar[str] = "bench run"
    description: ClassVar[str] = (
        "End-to-end bench: switch each profile through the control API, warm up, measure "
        "TTFT, TPOT, chunk gap, tok/s and accept length, gate correctness against `baseline`."
    )

    profiles: str | None = None
    spec: str | None = None
    out: str = DEFAULT_OUT
    fleet: str | None = None
    num_prompts: int | None = RunKnobs.num_prompts  # None (the flag left out): all of --prompts, else the default
    leave_on: str | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = parser
        flags.URL.add(p)
        flags.CONTROL.add(p)
        flags.PROFILES.add(p, help=f"{flags.PROFILES.help}, 'stable' (every stable profile) or 'all' (default stable); "
                                   "with --no-switch, the one name the running server is labelled with when no "
                                   "control API answers")
        flags.SPEC.add(p, help=f"comma-separated spec modes (default {RunSettings.DEFAULT_SPECS}); with --no-switch, "
                               "the one mode the running server uses")
        flags.EAGLE3.add(p, help=f"{flags.EAGLE3.help} measured as extra cells per profile, each switched with its "
                                 "point and labelled profile+eagle3(S,K,D), e.g. --eagle3 '1,1,2;3,1,4'; the server "
                                 "refuses a point SGLang would not run as given (HTTP 400, exit 2)")
        p.add_argument("--repeats", type=int, default=cls.repeats, help=f"measured repeats per concurrency level (default {cls.repeats})")
        flags.CONCURRENCY.add(p, cls.concurrency)
        flags.NUM_PROMPTS.add(p, None, help=flags.NUM_PROMPTS.help.format(default=RunKnobs.num_prompts))
        flags.PROMPTS.add(p)
        flags.MAX_TOKENS.add(p, cls.max_tokens)
        flags.TEMPERATURE.add(p, cls.temperature)
        flags.WORKLOAD.add(p, cls.workload)
        flags.API.add(p, cls.api)
        p.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
        flags.WARMUP.add(p, cls.warmup)
        p.add_argument("--no-switch", action="store_true", help="bench whatever is running; do not switch")
        p.add_argument("--leave-on", metavar="CELL", default=None,
                       help="leave production on this measured cell (e.g. fused+eagle3, fused+eagle3(1,1,2)) when it "
                            "passed the correctness gate; by default production goes back to the plan found running")
        p.add_argument("--connect-timeout", type=float, default=cls.connect_timeout,
                       help=f"seconds to wait for a connection (default {cls.connect_timeout:g})")
        flags.SWITCH_TIMEOUT.add(p, cls.switch_timeout)
        flags.HEALTH_TIMEOUT.add(p, cls.health_timeout)
        p.add_argument("--read-timeout", type=float, default=cls.read_timeout,
                       help=f"seconds a request may go without receiving a byte, headers included (default {cls.read_timeout:g})")
        p.add_argument("--request-timeout", type=float, default=cls.request_timeout,
                       help="seconds one request may take in all; a stream that never ends fails then "
                            f"(default {cls.request_timeout:g})")
        flags.SEED.add(p, cls.seed)
        flags.OUT.add(p, DEFAULT_OUT, help=f"{flags.OUT.help}; the bundle goes to OUT/<run-id>/ (default {DEFAULT_OUT})")
        flags.FLEET.add(p, help=f"{flags.FLEET.help}: bench each host in turn (its server and control API, its token), "
                                "one bundle per host in OUT/<host>/<run-id>/; for the fleet as a whole, give --url "
                                "<router> instead")
        return p

    def settings(self, argv: list[str]) -> RunSettings:
        """What the run measures (exit 2 on a bad value), as the manifest records it."""
        for flag, v in (("--repeats", self.repeats), ("--max-tokens", self.max_tokens)):
            if v < 1:
                raise UserError(f"{flag} {v}: must be at least 1")
        if self.warmup < 0:
            raise UserError("--warmup must be 0 or more")
        for flag, t in (("--connect-timeout", self.connect_timeout), ("--read-timeout", self.read_timeout),
                        ("--request-timeout", self.request_timeout)):
            if not t > 0 or t == float("inf"):
                raise UserError(f"{flag} {t}: must be a positive number of seconds")
        concurrency = positive_ints("--concurrency", self.concurrency)
        temp = temperature("--temperature", self.temperature)
        workload, num_prompts, prompts_sha = choose_prompts(self.prompts, self.num_prompts, RunKnobs.num_prompts,
                                                            self.workload)
        if not self.no_switch:  # cells switched to are gated against baseline's; one --no-switch cell has no reference
            correctness.check_workload(num_prompts, self.max_tokens, logprob_gate.thresholds())
        if self.no_switch:
            profiles = single_name("--profiles", self.profiles)
            specs = single_name("--spec", self.spec)
        else:
            profiles, specs = self.profiles, self.spec
            for flag, value in (("--profiles", profiles), ("--spec", specs)):
                if value is not None and not csv(value):
                    raise UserError(f"{flag} is empty; give one or more names")
        for flag, value in (("--profiles", profiles), ("--spec", specs)):
            for name in csv(value):
                if name not in KEYWORDS:
                    given_name(flag, name)
        if self.leave_on is not None and (self.no_switch or not self.leave_on.strip()):
            raise UserError("--leave-on names a cell this run switches to (e.g. fused+eagle3); "
                            + ("drop --no-switch (or --leave-on)" if self.no_switch else "it is empty"))
        eagle3 = None
        if self.eagle3 is not None:
            if self.no_switch:
                raise UserError("--eagle3 switches to each point; drop --no-switch (or --eagle3)")
            eagle3 = [p.model_dump() for p in parse_list(self.eagle3, "--eagle3")]
        url = http_url("--url", self.url) if self.url else settings.KIT_SERVER_URL.get()
        control = http_url("--control", self.control) if self.control else settings.control_url()
        same = {f.name: getattr(self, f.name) for f in fields(RunKnobs)}
        return RunSettings(**{
            **same, "out": self.out, "url": url, "profiles": profiles, "specs": specs, "eagle3": eagle3, "control": control,
            "concurrency": concurrency, "temperature": temp, "workload": workload, "num_prompts": num_prompts,
            "prompts_sha256": prompts_sha, "leave_on": self.leave_on.strip() if self.leave_on else None,
            "control_given": bool(self.control) or settings.KIT_CONTROL_URL.is_set(), "argv": list(argv),
        })


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = RunArgs.parse(argv)
    stop_on_interrupt(sigterm=True)  # Ctrl-C and SIGTERM write the partial bundle and put production back
    return run_cli(lambda: run_main(args, argv=argv, console=Console(stderr=True)))


def run_main(args: RunArgs, *, argv: list[str], console: Console) -> int:
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
        start = client.running_plan()
        if not start or not start.get("name"):
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
