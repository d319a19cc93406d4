"""The numbers of a cell: each repeat's (`RepeatSummary`, its latency distributions `Percentiles`) and each
concurrency level's across its repeats (`Level`, per number a `Spread`; bench/bundle/aggregate.py makes them).

On disk they stand flat, as older bundles wrote them: a repeat's latency metric as its `<stat>_<metric>_ms`
keys, a level's number as `<name>`, `<name>_mean` and `<name>_sd`; these records read and write that shape.
The record that holds them: bench/bundle/schema.py `Cell`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from bench import JsonObject
from bench.bundle.strict_types import Num, Part

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency")  # each repeat's distributions, ms
DIST_STATS = ("mean", "median", "std", "p90", "p99")  # bench/bundle/summary_stats.py distribution
# per-repeat numbers that identify the repeat or its server, never measured: not aggregated, kept when invalid
SKIP_AGG = frozenset({"repeat", "concurrency", "request_rate", "server_start_time", "restarts_before", "restarts_after", "pid_before",
                      "pid_after"})
OPEN_LOOP_KEYS = ("request_rate", "achieved_rate", "running_max", "running_mean", "queued_max",
                  "queued_mean", "median_queue_time_ms", "p99_queue_time_ms")
ENERGY_KEYS = ("energy_joules", "average_watts", "joules_per_token", "energy_method", "energy_note")
OPTIONAL_KEYS = ("tune_phase", "tune_round", "spec_correct_drafts_histogram", *OPEN_LOOP_KEYS, *ENERGY_KEYS)  # left out of a repeat's record when None
KEPT_WHEN_INVALID = frozenset({"completed", "failed", "chunks"})  # counts an invalid repeat keeps


def flat_key(stat: str, metric: str) -> str:
    """The on-disk key of one statistic of one latency metric of a repeat: `mean_ttft_ms`, `p99_itl_ms`, ..."""
    return f"{stat}_{metric}_ms"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class Percentiles(BaseModel):
    """One latency metric's distribution over the requests of one repeat, in ms; on disk as its
    `<stat>_<metric>_ms` keys (`mean_ttft_ms`, `p99_itl_ms`, ...)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, frozen=True)
    mean: Num = None
    median: Num = None
    std: Num = None
    p90: Num = None
    p99: Num = None


class RepeatSummary(BaseModel):
    """One measured repeat (bench/bundle/aggregate.py `repeat_summary`, completed by bench/run/repeat.py): its
    numbers, whether it is valid, its server's identity, and in a tune bundle the phase and round that measured
    it. On disk (a cell's `per_repeat`) every field stands at the top level, each latency metric as its
    `<stat>_<metric>_ms` keys, so older bundles load as they are; keys this record does not know are kept."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)
    repeat: int | None = None
    concurrency: int | None = None
    valid: bool | None = None
    invalid_reason: str | None = None
    completed: int | None = None
    failed: int | None = None
    duration: Num = None
    total_output_tokens: int | None = None
    request_throughput: Num = None
    output_throughput: Num = None
    ttft: Percentiles = Percentiles()
    tpot: Percentiles = Percentiles()
    itl: Percentiles = Percentiles()
    e2e_latency: Percentiles = Percentiles()
    mean_request_output_throughput: Num = None
    median_request_output_throughput: Num = None
    accept_length: Num = None
    accept_length_source: str | None = None
    # the repeat's ok requests' correct-drafts histograms pooled (bench/bundle/acceptance.py); absent on disk when
    # None (no speculation, a server that sends none, an invalid repeat, a bundle written before it existed)
    spec_correct_drafts_histogram: list[Annotated[int, Field(ge=0)]] | None = None
    chunks: int | None = None
    client_cpu_us_per_chunk: Num = None
    server_start_time: Num = None
    restarts_before: int | None = None
    restarts_after: int | None = None
    tune_phase: str | None = None
    tune_round: int | None = None
    # an open-loop repeat's (bench/client/open_loop.py); absent from a closed-loop repeat's record
    request_rate: Num = None  # the rate asked for, requests/s
    achieved_rate: Num = None  # the rate the requests left at: (requests - 1) / first send to last send
    running_max: Num = None  # the server's running requests (/metrics) while the repeat ran: most, mean
    running_mean: Num = None
    queued_max: Num = None  # and its waiting requests
    queued_mean: Num = None
    median_queue_time_ms: Num = None  # the server's queue wait per request, where it reports one (--enable-metrics)
    p99_queue_time_ms: Num = None
    # the GPUs' energy over the repeat, where NVML answered (bench/client/power.py); else `energy_note` says why
    energy_joules: Num = None  # every GPU together
    average_watts: Num = None
    joules_per_token: Num = None  # energy_joules / total_output_tokens
    energy_method: str | None = None  # energy-counter or power-samples
    energy_note: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """The on-disk shape read: each latency metric's `<stat>_<metric>_ms` keys gathered into its Percentiles."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for metric in LATENCY_METRICS:
            dist = {stat: out.pop(flat_key(stat, metric)) for stat in DIST_STATS if flat_key(stat, metric) in out}
            if dist and metric not in out:
                out[metric] = dist
        return out

    @model_serializer(mode="wrap")
    def _flatten(self, handler: Any) -> JsonObject:
        data: JsonObject = handler(self)
        for metric in LATENCY_METRICS:
            dist = data.pop(metric)
            data.update({flat_key(stat, metric): dist[stat] for stat in DIST_STATS})
        for key in OPTIONAL_KEYS:  # a tune bundle's repeats, an open-loop repeat's
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def to_json(self) -> JsonObject:
        """The on-disk shape (see the class)."""
        return self.model_dump(mode="json")

    def numbers(self) -> dict[str, int | float]:
        """Every number of the repeat by its on-disk key (`output_throughput`, `mean_ttft_ms`, ...)."""
        return {k: v for k, v in self.to_json().items() if _is_number(v)}

    def nulled(self) -> RepeatSummary:
        """The repeat made invalid: its counts and identity kept, no number that could be read as a measurement."""
        gone = {k: None for k in self.numbers() if k not in KEPT_WHEN_INVALID and k not in SKIP_AGG}
        return RepeatSummary.model_validate({**self.to_json(), **gone, "accept_length_source": None,
                                             "spec_correct_drafts_histogram": None})


class Spread(BaseModel):
    """One number of a level across its valid repeats: `value` (the mean; the sum for counts), `mean`, `sd`
    (sample); on disk as `<name>`, `<name>_mean` and `<name>_sd`."""

    model_config = ConfigDict(frozen=True)
    value: int | float | None = None
    mean: int | float | None = None
    sd: int | float | None = None


SPREAD_SUFFIXES = (("_mean", "mean"), ("_sd", "sd"))


class Level(Part):
    """One concurrency level's aggregate (bench/bundle/aggregate.py `aggregate`): per number a Spread (its flat
    keys on disk, each a number or null: a damaged one is named by its key), how many repeats were valid,
    and the accept length's source label."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)
    __pydantic_extra__: dict[str, Num]  # the spreads, and the level's `concurrency`
    accept_length_source: str | None = None
    repeats_valid: int | None = None

    @classmethod
    def of(cls, spreads: Mapping[str, Spread], *, concurrency: int | None = None, repeats_valid: int,
           accept_length_source: str | None, request_rate: float | None = None) -> Level:
        """The level of these spreads, laid out as on disk: a closed-loop level names its `concurrency`, an
        open-loop one its `request_rate`."""
        flat: JsonObject = {} if concurrency is None else {"concurrency": concurrency}
        if request_rate is not None:
            flat["request_rate"] = request_rate
        for name, s in spreads.items():
            flat.update({f"{name}_mean": s.mean, f"{name}_sd": s.sd, name: s.value})
        return cls.model_validate({**flat, "accept_length_source": accept_length_source,
                                   "repeats_valid": repeats_valid})

    def spreads(self) -> dict[str, Spread]:
        """Every number of the level by name (a lone `<name>_mean` in an older file reads as that mean)."""
        parts: dict[str, dict[str, Any]] = {}
        for key, v in (self.model_extra or {}).items():
            if key in ("concurrency", "request_rate"):
                continue
            name, part = key, "value"
            for suffix, field in SPREAD_SUFFIXES:
                if key.endswith(suffix):
                    name, part = key[: -len(suffix)], field
            parts.setdefault(name, {})[part] = v
        return {name: Spread(**p) for name, p in parts.items()}

    def spread(self, name: str) -> Spread:
        extra = self.model_extra or {}
        return Spread(value=extra.get(name), mean=extra.get(f"{name}_mean"), sd=extra.get(f"{name}_sd"))

    def mean(self, name: str) -> int | float | None:
        """The mean over the level's valid repeats of one number (`output_throughput`, `mean_tpot_ms`, ...)."""
        return self.spread(name).mean

    def sd(self, name: str) -> int | float | None:
        return self.spread(name).sd

    def value(self, name: str) -> int | float | None:
        """The level's number: the mean, or the sum for counts (bench/bundle/aggregate.py SUMMED_KEYS)."""
        return self.spread(name).value

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")

