"""What `bench sla` measures (`SlaSettings`): `bench run`'s server and workload flags (RunSettings, extended as
TuneSettings extends RunKnobs) plus the SLA's targets and the search's range, each flag declared once as a field;
`settings_from` checks the flags that depend on each other (exit 2 naming the flag)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench import JsonObject
from bench import args as flags
from bench.args import Given, at_least, option
from bench.client.arrivals import Arrivals
from bench.client.workload import choose_prompts
from bench.run import correctness, logprob_gate
from bench.run.selection import KEYWORDS, csv, given_name, single_name
from bench.run.settings import RunSettings
from launcher import settings
from launcher.errors import UserError


def _ms(flag: str, value: float) -> float:
    if not 0 < value < math.inf:
        raise UserError(f"{flag} {value:g}: give a target above 0, in milliseconds")
    return float(value)


def _rate(flag: str, value: float) -> float:
    if not 0 < value < math.inf:
        raise UserError(f"{flag} {value:g}: give a request rate above 0, requests/s")
    return float(value)


def _precision(flag: str, value: float) -> float:
    if not 0 < value < math.inf:
        raise UserError(f"{flag} {value:g}: give a relative precision above 0 (0.1: stop when the bracket's "
                        "high rate is within 10% of its low one)")
    return float(value)


@dataclass(kw_only=True)
class SlaSettings(RunSettings):
    """`bench run`'s settings without its load flags (the search picks the open-loop rates; no closed-loop level,
    no --leave-on, no --fleet), with the SLA: p99 targets, the range and precision of the search."""

    ttft_p99_ms: float | None = option("--ttft-p99-ms", None, type=float, check=_ms, metavar="MS",
                                       help="target: p99 TTFT of the requests at a rate, pooled over its repeats (required)")
    tpot_p99_ms: float | None = option("--tpot-p99-ms", None, type=float, check=_ms, metavar="MS",
                                       help="target: p99 TPOT of the requests at a rate, pooled over its repeats (required)")
    rate_start: float = option("--rate-start", 1.0, check=_rate,
                               help="first rate probed, requests/s (default {default:g}; clamped into "
                                    "[--rate-min, --rate-max])")
    rate_min: float = option("--rate-min", 0.1, check=_rate,
                             help="lowest rate probed (default {default:g}): a cell failing there is 'below --rate-min'")
    rate_max: float = option("--rate-max", 256.0, check=_rate,
                             help="highest rate probed (default {default:g}): a cell meeting there is 'at least "
                                  "--rate-max'")
    precision: float = option("--precision", 0.1, check=_precision,
                              help="relative precision: the search stops when the rate that failed is at most "
                                   "1 + this times the rate that met (default {default:g})")
    json: bool = option("--json", False, help="print the table as JSON (each cell with its max_request_rate)")
    num_prompts: int = flags.NUM_PROMPTS(32)
    repeats: int = option("--repeats", 2, check=at_least(1),
                          help="repeats at each probed rate, their requests pooled for the p99s (default {default})")
    burstiness: float = option("--burstiness", 1.0, check=flags.burstiness,
                               help="the gamma shape of the gaps between arrivals, as vLLM's bench serve: 1 Poisson "
                                    "(default), below 1 burstier, above 1 more regular")
    max_concurrency: int | None = option("--max-concurrency", None, type=int, check=at_least(1),
                                         help="at most this many requests in flight; one over it waits in the client "
                                              "(default: no cap)")
    # `bench run`'s load flags: the search chooses the rates; no closed-loop level, no --leave-on, no --fleet
    concurrency: list[int] = field(default_factory=list)
    request_rate: list[float] | None = None
    leave_on: str | None = None
    fleet: str | None = None

    def arrivals_at(self, rate: float) -> Arrivals:
        """One probe's load: `rate` requests/s with --burstiness and --max-concurrency."""
        return Arrivals(rate, self.burstiness, self.max_concurrency)

    def to_json(self) -> JsonObject:
        out = super().to_json()
        out.pop("json", None)
        return out

    def targets(self) -> dict[str, float]:
        assert self.ttft_p99_ms is not None and self.tpot_p99_ms is not None
        return {"ttft_p99_ms": self.ttft_p99_ms, "tpot_p99_ms": self.tpot_p99_ms}


def settings_from(given: Given, argv: list[str]) -> SlaSettings:
    """The settings (exit 2 on a bad value, naming the flag), as the manifest records them."""
    values = given.checked()
    for flag, name in (("--ttft-p99-ms", "ttft_p99_ms"), ("--tpot-p99-ms", "tpot_p99_ms")):
        if values.get(name) is None:
            raise UserError(f"{flag} is required: the p99 target in milliseconds a rate must meet")
    low, high = values.get("rate_min", SlaSettings.rate_min), values.get("rate_max", SlaSettings.rate_max)
    if low > high:
        raise UserError(f"--rate-min {low:g} is above --rate-max {high:g}; give a range low to high")
    no_switch = values.get("no_switch", False)
    workload, num_prompts, prompts_sha = choose_prompts(given.prompts, given.num_prompts, SlaSettings.num_prompts,
                                                        values.get("workload", SlaSettings.workload))
    if num_prompts < 2:
        raise UserError(f"--num-prompts {num_prompts}: a probe needs at least 2 requests to have a rate")
    if not no_switch:
        correctness.check_workload(num_prompts, values.get("max_tokens", SlaSettings.max_tokens),
                                   logprob_gate.thresholds())
        for flag, value in (("--profiles", given.profiles), ("--spec", given.specs)):
            if value is not None and not csv(value):
                raise UserError(f"{flag} is empty; give one or more names")
    else:
        values["profiles"] = single_name("--profiles", given.profiles)
        values["specs"] = single_name("--spec", given.specs)
        if given.eagle3 is not None:
            raise UserError("--eagle3 switches to each point; drop --no-switch (or --eagle3)")
    for flag, value in (("--profiles", values.get("profiles")), ("--spec", values.get("specs"))):
        for name in csv(value):
            if name not in KEYWORDS:
                given_name(flag, name)
    return SlaSettings(**{
        **values, **flags.endpoints(values), "workload": workload, "num_prompts": num_prompts,
        "prompts_sha256": prompts_sha, "control_given": bool(given.control) or settings.KIT_CONTROL_URL.is_set(),
        "argv": list(argv),
    })
