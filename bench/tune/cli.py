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

import argparse
import asyncio
import contextlib
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from rich.console import Console

from bench import args as flags
from bench.args import CliArgs, TargetArgs, http_url, positive_ints, stop_on_interrupt, temperature
from bench.client.workload import choose_prompts
from bench.control.hold import MeasureHold, holder_of
from bench.run import correctness, logprob_gate
from bench.tune import decision, order, production, result, space
from bench.tune.decision import Objective
from bench.tune.journal import JOURNAL
from bench.tune.profile_out import check_profile_target
from bench.tune.runner import TuneRun
from bench.tune.settings import DEFAULT_BUDGET, DEFAULT_OUT, DEFAULT_SPECS, TuneKnobs, TuneSettings
from launcher import settings
from launcher.errors import UserError, run_cli
from launcher.profiles.catalog import BASE_NAME, check_name
from launcher.profiles.hostfacts import recipe
from launcher.profiles.spec_params import parse_list
from launcher.resources import builtin_profiles_dir
from launcher.runtime.api.control_client import SyncControlClient


@dataclass(kw_only=True)
class TuneArgs(CliArgs, TargetArgs, TuneKnobs):
    """The flags as given; `settings()` checks them (exit 2) and resolves URLs from the environment."""

    prog: ClassVar[str] = "bench tune"
    description: ClassVar[str] = (
        "Find the fastest correct setup for this host (profile x spec mode x EAGLE-3 point) within a time "
        "budget: screen every profile, then successive halving; decide with blocked, mirrored final repeats and a "
        "bootstrap test; gate "
        "every cell against baseline, write tune.json, a plot and a profile file; production is put back on "
        "the plan it started with unless --apply. With --adaptive, also SGLang's own per-batch-size adaptive "
        "config, written from the fastest static point at each --concurrency level and decided on like the rest."
    )

    profiles: str = space.ELIGIBLE
    spec: str = DEFAULT_SPECS
    budget: str = DEFAULT_BUDGET
    objective: str = "tokps"
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput_unit: str = "req/s"
    out: str = DEFAULT_OUT
    num_prompts: int | None = TuneKnobs.num_prompts  # None (the flag left out): all of --prompts, else the default

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = parser
        flags.URL.add(p, help=f"SGLang server URL (default ${settings.KIT_SERVER_URL.name})")
        flags.CONTROL.add(p, help="control API URL (default $KIT_CONTROL_URL or http://$KIT_CONTROL_HOST:$KIT_CONTROL_PORT)")
        flags.PROFILES.add(p, cls.profiles, help=f"{flags.PROFILES.help}, or 'eligible' (default): every profile the "
                                                 "launcher's rules accept with the host facts (--facts)")
        flags.SPEC.add(p, cls.spec)
        flags.EAGLE3.add(p, help=f"{flags.EAGLE3.help} tried under eagle3 (default "
                                 f"'{';'.join(pt.text() for pt in space.DEFAULT_POINTS)}')")
        p.add_argument("--budget", default=cls.budget,
                       help=f"time for the whole tune, switches included: 90s, 20m, 3h, 1h30m (default {cls.budget})")
        flags.CONCURRENCY.add(p, cls.concurrency, help="comma-separated concurrency levels measured in each repeat; the "
                                                       "objective is judged at the first (default {default})")
        p.add_argument("--objective", choices=("tokps", "goodput"), default=cls.objective,
                       help="what the winner is chosen on: output tok/s (default) or goodput under --ttft-ms and "
                            "--tpot-ms targets, at the first --concurrency level")
        p.add_argument("--ttft-ms", type=float, default=None, help="goodput: TTFT target in ms")
        p.add_argument("--tpot-ms", type=float, default=None, help="goodput: TPOT target in ms")
        p.add_argument("--goodput-unit", choices=("req/s", "tok/s"), default=cls.goodput_unit,
                       help="goodput counted as requests/s (default) or their output tok/s")
        flags.OUT.add(p, cls.out, help="output folder: the journal (resume) in OUT/, the bundle in OUT/<run-id>/ "
                                       "(default {default})")
        p.add_argument("--apply", action="store_true",
                       help="switch the server to the winner at the end (default: back to the plan it started with)")
        p.add_argument("--fresh", action="store_true",
                       help="measure afresh: the journal and state in OUT/ are kept aside (renamed), not resumed or "
                            "reused")
        flags.FLEET.add(p, help=f"{flags.FLEET.help}: roll the winner through the fleet at the end")
        p.add_argument("--profile-name", default=cls.profile_name,
                       help=f"name of the profile file written for the winner (default {cls.profile_name})")
        p.add_argument("--profile-dir", default=None,
                       help="folder the profile file goes to (default the bundle folder); a folder the server reads "
                            "(KIT_PROFILES_DIR) lets --apply switch to it by name")
        p.add_argument("--facts", default=None,
                       help="host facts (`launcher doctor --json` output) for --profiles eligible "
                            f"(default ${settings.KIT_HOST_FACTS.name})")
        p.add_argument("--allreduce", default=None,
                       help="a `bench allreduce --out` result: its latency per profile orders the candidates")
        flags.NUM_PROMPTS.add(p, None, help=flags.NUM_PROMPTS.help.format(default=TuneKnobs.num_prompts))
        flags.PROMPTS.add(p)
        flags.MAX_TOKENS.add(p, cls.max_tokens)
        flags.TEMPERATURE.add(p, cls.temperature)
        flags.WORKLOAD.add(p, cls.workload)
        flags.API.add(p, cls.api)
        flags.WARMUP.add(p, cls.warmup)
        flags.SEED.add(p, cls.seed, help="workload and bootstrap seed (default {default})")
        flags.SWITCH_TIMEOUT.add(p, cls.switch_timeout, help="seconds one switch may take (default {default:g})")
        flags.HEALTH_TIMEOUT.add(p, cls.health_timeout,
                                 help="seconds to wait for /health after a switch (default {default:g})")
        p.add_argument("--screen-repeats", type=int, default=cls.screen_repeats,
                       help=f"repeats per candidate in the first halving round (default {cls.screen_repeats})")
        p.add_argument("--final-repeats", type=int, default=cls.final_repeats,
                       help=f"final repeats per finalist and the running plan (default {cls.final_repeats}; "
                            f"fewer than {decision.MIN_REPEATS} can never declare a winner)")
        p.add_argument("--final-blocks", type=int, default=cls.final_blocks,
                       help=f"blocks each final arm's repeats are split into, one switch per block, mirrored "
                            f"A B C C B A (default {cls.final_blocks}; docs/tune.md)")
        p.add_argument("--finalists", type=int, default=cls.finalists,
                       help=f"candidates that reach the final beside the running plan (default {cls.finalists})")
        p.add_argument("--adaptive", action="store_true",
                       help="also write SGLang's --speculative-adaptive-config from the static points: measure every "
                            "point at each --concurrency level (1 and at least two higher, e.g. 1,4,16), take the "
                            "fastest correct EAGLE-3 point at each level, write one tier per level with its steps "
                            "(keyed where SGLang routes the level's batches; never 0 from off: a 0-step tier is still "
                            "an EAGLE pass), and put that eagle3-adaptive plan in the final beside the best static "
                            "ones and the running plan; judged on the geometric mean of tok/s over the levels; "
                            "needs --spec with off and eagle3 (docs/tune.md)")
        return p

    def settings(self, argv: list[str]) -> TuneSettings:
        """Check every flag (exit 2 naming it) and resolve what the environment supplies."""
        for flag, v in (("--max-tokens", self.max_tokens),
                        ("--screen-repeats", self.screen_repeats), ("--final-repeats", self.final_repeats),
                        ("--final-blocks", self.final_blocks), ("--finalists", self.finalists)):
            if v < 1:
                raise UserError(f"{flag} {v}: must be at least 1")
        if self.warmup < 0:
            raise UserError(f"--warmup {self.warmup}: must be 0 or more")
        for flag, t in (("--switch-timeout", self.switch_timeout), ("--health-timeout", self.health_timeout)):
            if not 0 < t < float("inf"):
                raise UserError(f"{flag} {t}: must be a positive number of seconds")
        budget_s = order.parse_budget(self.budget)
        specs = space.parse_specs(self.spec)
        points = parse_list(self.eagle3, "--eagle3") if self.eagle3 is not None else space.DEFAULT_POINTS
        if self.eagle3 is not None and "eagle3" not in specs:
            raise UserError("--eagle3 points are measured under spec mode eagle3: add eagle3 to --spec or drop --eagle3")
        profiles: tuple[str, ...] | str
        if self.profiles.strip() == space.ELIGIBLE:
            profiles = space.ELIGIBLE
        else:
            names = tuple(dict.fromkeys(n.strip() for n in self.profiles.split(",")))
            for name in names:
                if not name:
                    raise UserError("--profiles has an empty name; give names separated by commas, or 'eligible'")
                check_name("profile", name)
            profiles = names
        facts = self.facts or settings.KIT_HOST_FACTS.get()
        if profiles == space.ELIGIBLE and not facts:
            raise UserError(f"--profiles eligible needs the host facts: give --facts FILE (`{recipe('FILE')}`) "
                            f"or set {settings.KIT_HOST_FACTS.name}; or name the profiles (--profiles a,b)")
        if facts and not Path(facts).is_file():
            raise UserError(f"--facts {facts}: no such file; write it with `{recipe(facts)}`")
        if self.allreduce and not Path(self.allreduce).exists():
            raise UserError(f"--allreduce {self.allreduce}: no such file or folder (a `bench allreduce --out` result)")
        concurrency = positive_ints("--concurrency", self.concurrency)
        if self.adaptive:
            check_adaptive(concurrency, specs, self.objective)
        if self.objective == "goodput" and (self.ttft_ms is None or self.tpot_ms is None):
            raise UserError("--objective goodput needs both --ttft-ms and --tpot-ms (the targets a request must meet)")
        for flag, v in (("--ttft-ms", self.ttft_ms), ("--tpot-ms", self.tpot_ms)):
            if v is not None and not 0 < v < float("inf"):
                raise UserError(f"{flag} {v}: must be a positive number of milliseconds")
        objective = Objective(kind=self.objective, concurrency=concurrency[0], ttft_ms=self.ttft_ms,  # type: ignore[arg-type]
                              tpot_ms=self.tpot_ms, goodput_unit=self.goodput_unit,  # type: ignore[arg-type]
                              levels=tuple(sorted(set(concurrency))) if self.adaptive else ())
        check_name("profile", self.profile_name)
        if (builtin_profiles_dir() / f"{self.profile_name}.toml").is_file() or self.profile_name == BASE_NAME:
            raise UserError(f"--profile-name {self.profile_name}: a built-in profile has that name; the written file "
                            "would shadow it (and extend itself); choose another name, e.g. the default "
                            f"'{TuneKnobs.profile_name}' (nothing was switched)")
        if self.fleet and not Path(self.fleet).is_file():
            raise UserError(f"--fleet {self.fleet}: no such file")
        temp = temperature("--temperature", self.temperature)
        workload, num_prompts, prompts_sha = choose_prompts(self.prompts, self.num_prompts, TuneKnobs.num_prompts,
                                                            self.workload)
        correctness.check_workload(num_prompts, self.max_tokens, logprob_gate.thresholds())
        url = http_url("--url", self.url) if self.url else settings.KIT_SERVER_URL.get()
        control = http_url("--control", self.control) if self.control else settings.control_url()
        same = {f.name: getattr(self, f.name) for f in fields(TuneKnobs)}
        return TuneSettings(**{
            **same, "temperature": temp, "workload": workload, "num_prompts": num_prompts, "prompts_sha256": prompts_sha,
            "url": url, "control": control, "out": self.out, "profiles": profiles, "specs": specs,
            "points": tuple(points), "budget_s": budget_s, "concurrency": concurrency, "objective": objective,
            "facts": facts, "argv": list(argv),
        })


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
