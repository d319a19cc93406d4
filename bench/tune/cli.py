"""`bench tune`: find the fastest correct setup for this host (profile × spec mode × EAGLE-3 point)
within a time budget, and put it in production only when asked (`--apply`, `--fleet`).

Everything the user can get wrong is checked here, before anything is switched (exit 2, naming the
flag): unknown profile or spec mode (against the control API's own lists, in bench/tune/planning.py,
also before the first switch), a point SGLang would not run as written, a budget that is not a
duration, a goodput objective without its targets, a profile name that would overwrite a file the
tuner did not write. Exit codes: 0 done (with or without a winner), 1 runtime failure, 2 bad input,
130 interrupted (production put back on the plan it started with; the same command resumes).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

from rich.console import Console

from bench import args as flags
from bench.args import Command, Given, stop_on_interrupt
from bench.client.workload import choose_prompts
from bench.control.hold import MeasureHold, holder_of
from bench.run import correctness, logprob_gate
from bench.tune import production, result, space
from bench.tune.journal import JOURNAL
from bench.tune.objective import Objective
from bench.tune.profile_out import check_profile_target
from bench.tune.runner import TuneRun
from bench.tune.settings import TuneSettings
from launcher import settings
from launcher.errors import UserError, run_cli
from launcher.profiles.catalog import BASE_NAME, check_name
from launcher.profiles.hostfacts import recipe
from launcher.resources import builtin_profiles_dir
from launcher.runtime.api.control_client import SyncControlClient


def settings_from(given: Given, argv: list[str]) -> TuneSettings:
    """Check every flag (exit 2 naming it) and resolve what the environment supplies."""
    values = given.checked()
    specs = values.get("specs", ())
    if given.points is not None and "eagle3" not in specs:
        raise UserError("--eagle3 points are measured under spec mode eagle3: add eagle3 to --spec or drop --eagle3")
    profiles = values.get("profiles")
    facts = given.facts or settings.KIT_HOST_FACTS.get()
    if profiles == space.ELIGIBLE and not facts:
        raise UserError(f"--profiles eligible needs the host facts: give --facts FILE (`{recipe('FILE')}`) "
                        f"or set {settings.KIT_HOST_FACTS.name}; or name the profiles (--profiles a,b)")
    if facts and not Path(facts).is_file():
        raise UserError(f"--facts {facts}: no such file; write it with `{recipe(facts)}`")
    if given.allreduce and not Path(given.allreduce).exists():
        raise UserError(f"--allreduce {given.allreduce}: no such file or folder (a `bench allreduce --out` result)")
    concurrency = values["concurrency"]
    if given.adaptive:
        check_adaptive(concurrency, specs, given.objective)
    if given.objective == "goodput" and (given.ttft_ms is None or given.tpot_ms is None):
        raise UserError("--objective goodput needs both --ttft-ms and --tpot-ms (the targets a request must meet)")
    values["objective"] = Objective(kind=given.objective, concurrency=concurrency[0], ttft_ms=given.ttft_ms,
                                    tpot_ms=given.tpot_ms, goodput_unit=values.get("goodput_unit", "req/s"),
                                    levels=tuple(sorted(set(concurrency))) if given.adaptive else ())
    name = values.get("profile_name", TuneSettings.profile_name)
    check_name("profile", name)
    if (builtin_profiles_dir() / f"{name}.toml").is_file() or name == BASE_NAME:
        raise UserError(f"--profile-name {name}: a built-in profile has that name; the written file "
                        "would shadow it (and extend itself); choose another name, e.g. the default "
                        f"'{TuneSettings.profile_name}' (nothing was switched)")
    if given.fleet and not Path(given.fleet).is_file():
        raise UserError(f"--fleet {given.fleet}: no such file")
    workload, num_prompts, prompts_sha = choose_prompts(given.prompts, given.num_prompts, TuneSettings.num_prompts,
                                                        values.get("workload", TuneSettings.workload))
    correctness.check_workload(num_prompts, values.get("max_tokens", TuneSettings.max_tokens), logprob_gate.thresholds())
    return TuneSettings(**{
        **values, **flags.endpoints(values), "workload": workload, "num_prompts": num_prompts,
        "prompts_sha256": prompts_sha, "facts": facts, "argv": list(argv),
    })


TuneArgs = Command(TuneSettings, "bench tune", (
    "Find the fastest correct setup for this host (profile x spec mode x EAGLE-3 point) within a time "
    "budget: screen every profile, then successive halving; decide with blocked, mirrored final repeats and a "
    "bootstrap test; gate every cell against baseline, write tune.json, a plot and a profile file; production is "
    "put back on the plan it started with unless --apply. With --adaptive, also SGLang's own per-batch-size "
    "adaptive config, written from the fastest static point at each --concurrency level and decided on like the "
    "rest."), settings_from)


def check_adaptive(concurrency: list[int], specs: tuple[str, ...], objective: str) -> None:
    """--adaptive's needs (exit 2): levels 1 and at least two higher, off and eagle3 to fill tiers, tok/s."""
    levels = sorted(set(concurrency))
    if levels[0] != 1 or len(levels) < 3:
        raise UserError(f"--adaptive writes one tier per --concurrency level: give 1 and at least two higher levels "
                        f"(e.g. --concurrency 1,4,16), not {','.join(map(str, concurrency))}")
    missing = [m for m in ("off", "eagle3") if m not in specs]
    if missing:
        raise UserError(f"--adaptive fills tiers with EAGLE-3 points and measures off beside them (where off is "
                        f"faster the summary says so; a 0-step tier is still an EAGLE pass, never off): add "
                        f"{' and '.join(missing)} to --spec")
    if objective != "tokps":
        raise UserError("--adaptive judges output tok/s across the --concurrency levels; drop --objective goodput")


def tune(s: TuneSettings, *, token: str, console: Console) -> int:
    """Run the tune, write its results, and leave production as promised, whatever happened."""
    run = TuneRun(s, token, console)
    client = SyncControlClient(s.control, token, s.connect_timeout, url_from="--control / KIT_CONTROL_URL")
    with MeasureHold(client, holder_of("bench tune", run.out), run.say) as run.hold:  # until production is where it stays
        return _tune(run, console)


def _tune(run: TuneRun, console: Console) -> int:
    written: Path | None = None
    try:
        asyncio.run(run.run())
        written = result.write(run, complete=True)
        rc = production.finish(run, written)
        if not run.switched:  # production where the tune promised: a later run into OUT/ is no resume of it
            run.mark_finished(written)
        return rc
    except KeyboardInterrupt:
        console.print("interrupted: putting production back on the plan the tune started from", style="yellow")
        production.restore(run)
        if written is None and run.cells.entries:
            written = result.write(run, complete=False, interrupted=True)
        where = f"partial results in {written}; " if written else ""
        console.print(f"{where}the same command resumes from {run.out / JOURNAL}")
        return 130
    except BaseException:
        production.restore(run)  # nothing once production is back, or on the winner (--apply)
        if written is None and run.cells.entries:
            with contextlib.suppress(Exception):
                result.write(run, complete=False)
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = TuneArgs.parse(argv)
    token = settings.KIT_CONTROL_TOKEN.get()

    def work() -> int:
        s = args.settings(argv)
        if not token:
            raise UserError(f"bench tune switches the server: set {settings.KIT_CONTROL_TOKEN.name}")
        if s.profile_dir:
            check_profile_target(Path(s.profile_dir), s.profile_name)
        stop_on_interrupt(sigterm=True)  # stopped like Ctrl-C: production is put back first
        return tune(s, token=token, console=Console(stderr=True))

    return run_cli(work)


if __name__ == "__main__":
    raise SystemExit(main())
