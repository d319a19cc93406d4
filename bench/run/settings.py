"""Everything that decides what `bench run` measures, each flag declared once as a field (bench/args.py `Flag`):
`bench run`'s parser is built from these fields, and the manifest stores them verbatim (`to_json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from bench import args as flags
from bench.args import at_least, option, seconds
from bench.client.arrivals import Arrivals
from launcher.profiles.spec_params import SpecParams


@dataclass(kw_only=True)
class RunKnobs:
    """How each cell is measured: the flags `bench run` and `bench tune` share (TuneSettings extends these,
    with its own defaults where they differ), and what `bench tune` passes on to each cell it measures."""

    url: str = flags.URL()
    control: str | None = flags.CONTROL(None)
    out: str = flags.OUT("results", extend="; the bundle goes to OUT/<run-id>/ (default {default})")
    concurrency: list[int] = flags.CONCURRENCY()
    num_prompts: int = flags.NUM_PROMPTS(16)
    prompts: str | None = flags.PROMPTS(None)  # as given; `workload` is then "file:PATH" (bench/client/workload.py)
    max_tokens: int = flags.MAX_TOKENS(256)
    temperature: float = flags.TEMPERATURE(0.0)  # the timed requests'; the correctness pass is always greedy
    workload: str = flags.WORKLOAD("chat")
    api: str = flags.API("generate")
    warmup: int = flags.WARMUP(2)
    connect_timeout: float = option("--connect-timeout", 5.0, check=seconds,
                                    help="seconds to wait for a connection (default {default:g})")
    switch_timeout: float = flags.SWITCH_TIMEOUT(1800.0)
    health_timeout: float = flags.HEALTH_TIMEOUT(600.0)
    read_timeout: float = option("--read-timeout", 600.0, check=seconds,
                                 help="seconds a request may go without receiving a byte, headers included "
                                      "(default {default:g})")
    request_timeout: float = option("--request-timeout", 1800.0, check=seconds,
                                    help="seconds one request may take in all; a stream that never ends fails then "
                                         "(default {default:g})")
    seed: int = flags.SEED(1234)
    prompts_sha256: str | None = None  # sha256 of the --prompts file's bytes
    argv: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class RunSettings(RunKnobs):
    """`profiles` and `specs` are what the user asked for (None: not given); the server resolves them.
    `eagle3`: the `--eagle3` points, measured as extra cells."""

    DEFAULT_PROFILES: ClassVar[str] = "stable"
    DEFAULT_SPECS: ClassVar[str] = "eagle3,off"

    profiles: str | None = flags.PROFILES(
        None, shown=DEFAULT_PROFILES, extend=", 'stable' (every stable profile) or 'all' (default {default}); with "
                                             "--no-switch, the one name the running server is labelled with when no "
                                             "control API answers")
    specs: str | None = flags.SPEC(None, shown=DEFAULT_SPECS,
                                   extend="; with --no-switch, the one mode the running server uses")
    eagle3: list[SpecParams] | None = flags.EAGLE3(
        None, extend=" measured as extra cells per profile, each switched with its point and labelled "
                     "profile+eagle3(S,K,D), e.g. --eagle3 '1,1,2;3,1,4'; the server refuses a point SGLang would not "
                     "run as given (HTTP 400, exit 2)")
    request_rate: list[float] | None = option(
        "--request-rate", None, metavar="R[,R...]", check=flags.rates,
        help="open-loop request rates, requests/s, measured as extra levels of every cell besides --concurrency's: "
             "requests leave on a schedule drawn from --seed (the same for every profile) whether or not earlier ones "
             "finished, so they queue as real arrivals do (docs/bench.md, Open-loop load)")
    burstiness: float = option("--burstiness", 1.0, check=flags.burstiness,
                               help="with --request-rate, the gamma shape of the gaps between arrivals, as vLLM's "
                                    "bench serve: 1 Poisson (default), below 1 burstier, above 1 more regular")
    max_concurrency: int | None = option("--max-concurrency", None, type=int, check=at_least(1),
                                         help="with --request-rate, at most this many requests in flight; one over it "
                                              "waits in the client (default: no cap)")
    repeats: int = option("--repeats", 3, help="measured repeats per concurrency level (default {default})",
                          check=at_least(1))
    ignore_eos: bool = option("--ignore-eos", False, help="always generate --max-tokens tokens")
    no_switch: bool = option("--no-switch", False, help="bench whatever is running; do not switch")
    leave_on: str | None = option(
        "--leave-on", None, metavar="CELL",
        help="leave production on this measured cell (e.g. fused+eagle3, fused+eagle3(1,1,2)) when it passed the "
             "correctness gate; by default production goes back to the plan found running")
    fleet: str | None = flags.FLEET(
        None, extend=": bench each host in turn (its server and control API, its token), one bundle per host in "
                     "OUT/<host>/<run-id>/; for the fleet as a whole, give --url <router> instead")
    control_given: bool = False  # --control or KIT_CONTROL_URL: an unreachable one is then an error
    fleet_host: str | None = None  # `bench run --fleet`: the fleet file's name of the host measured

    @property
    def switching(self) -> bool:
        return not self.no_switch

    def arrivals(self) -> list[Arrivals]:
        """The open-loop loads `--request-rate` asks for, each with `--burstiness` and `--max-concurrency`."""
        return [Arrivals(rate, self.burstiness, self.max_concurrency) for rate in self.request_rate or ()]

    def to_json(self) -> dict[str, object]:
        """The manifest's `settings`: each point as {"steps", "topk", "draft_tokens"}; `--fleet` as each host's
        name (`fleet_host`), not the file's."""
        out = asdict(self)
        del out["fleet"]
        out["eagle3"] = [p.model_dump() for p in self.eagle3] if self.eagle3 is not None else None
        return out
