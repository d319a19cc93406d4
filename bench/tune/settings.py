"""Everything that decides what `bench tune` measures and how it ends (`TuneSettings`), each flag declared
once as a field: `bench tune`'s parser is built from them, bench/tune/cli.py checks the flags that depend
on each other and builds it; tune.json records it (`to_json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from bench import JsonObject
from bench import args as flags
from bench.args import at_least, option
from bench.run.settings import RunKnobs, RunSettings
from bench.tune import decision, order, schedule, space
from bench.tune.objective import Objective
from launcher import settings
from launcher.errors import UserError
from launcher.profiles.catalog import check_name
from launcher.profiles.spec_params import SpecParams, parse_list


def _profiles(flag: str, value: str) -> tuple[str, ...] | str:
    """`--profiles`: 'eligible', or the names in order, each a profile name (exit 2 naming it otherwise)."""
    if value.strip() == space.ELIGIBLE:
        return space.ELIGIBLE
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",")))
    for name in names:
        if not name:
            raise UserError(f"{flag} has an empty name; give names separated by commas, or 'eligible'")
        check_name("profile", name)
    return names


def _ms(flag: str, value: float) -> float:
    if not 0 < value < float("inf"):
        raise UserError(f"{flag} {value}: must be a positive number of milliseconds")
    return value


@dataclass(kw_only=True)
class TuneSettings(RunKnobs):
    """What the tune measures and decides on, each flag declared once as a field (bench/args.py `Flag`);
    `measuring()` is what makes repeats comparable (the journal keys reused cells on it)."""

    control: str = flags.CONTROL()
    out: str = flags.OUT("results/tune", help="output folder: the journal (resume) in OUT/, the bundle in OUT/<run-id>/ "
                                           "(default {default})")
    profiles: tuple[str, ...] | str = flags.PROFILES(
        given=space.ELIGIBLE, check=_profiles,
        extend=", or 'eligible' (default): every profile the launcher's rules accept with the host facts (--facts)")
    specs: tuple[str, ...] = flags.SPEC(given="off,ngram,eagle3", check=lambda _flag, text: space.parse_specs(text))
    points: tuple[SpecParams, ...] = flags.EAGLE3(
        space.DEFAULT_POINTS, check=lambda flag, text: tuple(parse_list(text, flag)),
        shown=";".join(pt.text() for pt in space.DEFAULT_POINTS), extend=" tried under eagle3 (default '{default}')")
    budget_s: float = option("--budget", given="2h", check=lambda _flag, text: order.parse_budget(text),
                             help="time for the whole tune, switches included: 90s, 20m, 3h, 1h30m (default {default})")
    concurrency: list[int] = flags.CONCURRENCY(help="comma-separated concurrency levels measured in each repeat; the "
                                                    "objective is judged at the first (default {default})")
    objective: Objective = option("--objective", given="tokps", choices=("tokps", "goodput"),
                                  help="what the winner is chosen on: output tok/s (default) or goodput under --ttft-ms "
                                       "and --tpot-ms targets, at the first --concurrency level")
    ttft_ms: float | None = option("--ttft-ms", None, type=float, check=_ms, help="goodput: TTFT target in ms")
    tpot_ms: float | None = option("--tpot-ms", None, type=float, check=_ms, help="goodput: TPOT target in ms")
    goodput_unit: str = option("--goodput-unit", "req/s", choices=("req/s", "tok/s"),
                               help="goodput counted as requests/s (default) or their output tok/s")
    apply: bool = option("--apply", False, help="switch the server to the winner at the end (default: back to the "
                                                "plan it started with)")
    fresh: bool = option("--fresh", False, help="measure afresh: the journal and state in OUT/ are kept aside "
                                                "(renamed), not resumed or reused")
    fleet: str | None = flags.FLEET(None, extend=": roll the winner through the fleet at the end")
    profile_name: str = option("--profile-name", "tuned",
                               help="name of the profile file written for the winner (default {default})")
    profile_dir: str | None = option("--profile-dir", None,
                                     help="folder the profile file goes to (default the bundle folder); a folder the "
                                          "server reads (KIT_PROFILES_DIR) lets --apply switch to it by name")
    facts: str | None = option("--facts", None, shown=f"${settings.KIT_HOST_FACTS.name}",
                               help="host facts (`launcher doctor --json` output; `make tune` writes them) for "
                                    "--profiles eligible (default {default})")
    allreduce: str | None = option("--allreduce", None, help="a `bench allreduce --out` result: its latency per "
                                                             "profile orders the candidates")
    num_prompts: int = flags.NUM_PROMPTS(8)
    seed: int = flags.SEED(RunKnobs.seed, help="workload and bootstrap seed (default {default})")
    screen_repeats: int = option("--screen-repeats", 2, check=at_least(1),
                                 help="repeats per candidate in the first halving round (default {default})")
    final_repeats: int = option("--final-repeats", decision.FINAL_REPEATS, check=at_least(1),
                                help="final repeats per finalist and the running plan (default {default}; fewer than "
                                     f"{decision.MIN_REPEATS} can never declare a winner)")
    final_blocks: int = option("--final-blocks", schedule.DEFAULT_BLOCKS, check=at_least(1),
                               help="blocks each final arm's repeats are split into, one switch per block, mirrored "
                                    "A B C C B A (default {default}; docs/tune.md)")
    finalists: int = option("--finalists", 2, check=at_least(1),
                            help="candidates that reach the final beside the running plan (default {default})")
    adaptive: bool = option(
        "--adaptive", False,
        help="also write SGLang's --speculative-adaptive-config from the static points: measure every point at each "
             "--concurrency level (1 and at least two higher, e.g. 1,4,16), take the fastest correct EAGLE-3 point at "
             "each level, write one tier per level with its steps (keyed where SGLang routes the level's batches; "
             "never 0 from off: a 0-step tier is still an EAGLE pass), and put that eagle3-adaptive plan in the final "
             "beside the best static ones and the running plan; judged on the geometric mean of tok/s over the "
             "levels; needs --spec with off and eagle3 (docs/tune.md)")
    # a cell's timeouts: `bench run`'s defaults, no flags of the tune's
    connect_timeout: float = RunKnobs.connect_timeout
    read_timeout: float = RunKnobs.read_timeout
    request_timeout: float = RunKnobs.request_timeout

    def reference_specs(self) -> tuple[str, ...]:
        """The spec modes a reference cell (baseline+<spec>) is measured for: --spec's, and eagle3-adaptive's under
        --adaptive (its candidate is gated against baseline under the same mode)."""
        return (*self.specs, space.ADAPTIVE_SPEC) if self.adaptive else self.specs

    def measuring(self) -> JsonObject:
        """The settings a repeat's numbers depend on (not the budget, not the space, not where results go).

        A --prompts file counts by its content (sha256), not its path: another file, or the same one edited,
        measures afresh; the same bytes elsewhere reuse the cells. The temperature and the file enter only
        when given, so a tune with neither keeps the digest it had before they existed."""
        out = {
            "url": self.url, "num_prompts": self.num_prompts, "max_tokens": self.max_tokens,
            "workload": "file" if self.prompts_sha256 else self.workload, "api": self.api, "warmup": self.warmup,
            "seed": self.seed, "concurrency": self.concurrency, "objective": asdict(self.objective),
        }
        if not self.objective.levels:  # a tune without --adaptive keeps the digest it had before it existed
            out["objective"].pop("levels")
        if self.prompts_sha256:
            out["prompts_sha256"] = self.prompts_sha256
        if self.temperature != 0:
            out["temperature"] = self.temperature
        return out

    def run_settings(self, *, switching: bool = True) -> RunSettings:
        """The `bench run` settings one cell is measured with (bench/run/measure.py): the knobs they share."""
        shared = {f.name: getattr(self, f.name) for f in fields(RunKnobs)}
        return RunSettings(**{**shared, "concurrency": list(self.concurrency), "argv": list(self.argv)},
                           repeats=self.screen_repeats, no_switch=not switching, control_given=True)

    def to_json(self) -> JsonObject:
        """tune.json's `settings`; the goodput targets as `objective` holds them."""
        out = asdict(self)
        for name in ("ttft_ms", "tpot_ms", "goodput_unit"):
            del out[name]
        out["points"] = [p.text() for p in self.points]
        out["profiles"] = self.profiles if isinstance(self.profiles, str) else list(self.profiles)
        return out
