"""The types of a results bundle's files, and the checks every file passes before anything is read.

`Cell` is the one record of a (profile, spec[, point]) result, the type `bench run` and `bench tune`
write and `bench report`, `compare` and `plots` read: its repeats are `RepeatSummary` records, its levels
`Level` records. `Manifest` is the manifest as its readers use it. A request row is read as the record
that measured it (bench/client/request_record.py `RequestRecord`).

A bundle is a folder of files anyone can edit, copy or damage. Every field the summaries, plots
and comparisons use is checked here for its type (strict: "12.5" is not a number), numbers must be
finite (1e999, NaN and Infinity are refused when the JSON is parsed), and names must follow the
profile name rule, since they become file names. A damaged file is a UserError (exit 2) naming
the file and the key, never a traceback. Manifest fields nobody reads are left alone, and a cell
file's keys its record does not hold are not read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bench import JsonObject
from bench.bundle import names as bundle_names
from launcher import strict_json
from launcher.errors import UserError, schema_error
from launcher.profiles import policy
from launcher.profiles.adaptive_tiers import SPEC_MODE as ADAPTIVE
from launcher.profiles.spec_params import SpecParams

Name = Annotated[str, StringConstraints(pattern=f"^{policy.NAME_PATTERN}$")]


def _number(value: Any) -> int | float | None:
    """An int or a finite float, kept as it is (a count stays a whole number); never a string or a bool."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("finite_number", "Input should be a finite number")
        return value
    raise PydanticCustomError("float_type", "Input should be a valid number")


Num = Annotated[int | float | None, PlainValidator(_number)]
M = TypeVar("M", bound=BaseModel)

FIX = "rerun `bench run`, or restore the file from the bundle's original copy"
HINTS = {
    "float_type": "give a number (not a string) or null; " + FIX,
    "int_type": "give a whole number (not a string); " + FIX,
    "string_pattern_mismatch": "names are 1-64 lowercase letters, digits, '.', '_' or '-'; " + FIX,
}


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Gpu(_Part):
    name: str


class _Host(_Part):
    """The host's fingerprint (launcher/doctor/fingerprint.py): what the summary and `bench compare` read."""

    available: bool | None = None
    gpus: list[_Gpu] = []
    driver: str | None = None
    nccl: str | None = None
    interconnect: str | None = None
    reason: str | None = None


class _Kit(_Part):
    version: str | None = None
    git_sha: str | None = None
    image_id: str | None = None


class _Server(_Part):
    url: str | None = None
    sglang_version: str | None = None


class _Settings(_Part):
    """What `bench run` measured (bench/run/settings.py RunSettings.to_json): the fields the summary shows."""

    concurrency: list[Annotated[int, Field(ge=1)]] = [1]
    fleet_host: str | None = None
    workload: str | None = None
    num_prompts: int | None = None
    api: str | None = None
    max_tokens: int | None = None
    ignore_eos: bool | None = None
    temperature: Num = None
    warmup: int | None = None
    repeats: int | None = None


class _Gate(_Part):
    """The gate's settings (bench/run/correctness.py GateSettings.as_dict: these and the log-probability
    thresholds); older bundles carry min_exact_match instead of the thresholds (and no null_factor)."""

    __pydantic_extra__: dict[str, Num]
    collapse_ratio: float = 0.6
    min_accept: Num = None
    min_exact_match: Num = None
    null_factor: Num = None
    mean_delta: Num = None
    p99_delta: Num = None
    max_delta: Num = None
    max_flip_gap: Num = None
    min_tokens: Num = None
    top_k: Num = None

    def setting(self, key: str) -> int | float | None:
        """One setting by its name (GATE_SETTINGS in bench/report/compare.py); None when the bundle has none."""
        value = getattr(self, key, None) if key in type(self).model_fields else (self.model_extra or {}).get(key)
        return value


class Manifest(_Part):
    """manifest.json (bench/run/matrix.py writes it): the fields its readers use; the rest is kept, unread."""

    run_id: str | None = None
    complete: bool | None = None
    interrupted: bool | None = None
    simulated: bool | None = None
    kit: _Kit = _Kit()
    host: _Host = _Host()
    server: _Server = _Server()
    settings: _Settings = _Settings()
    gate: _Gate = _Gate()
    matrix: list[str] = []

    @property
    def levels(self) -> list[int]:
        """The concurrency levels measured, in order (at least one)."""
        return list(self.settings.concurrency) or [1]


# ----- the numbers of a cell: each repeat's, and each level's across repeats (bench/bundle/aggregate.py) --------
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency")  # each repeat's distributions, ms
DIST_STATS = ("mean", "median", "std", "p90", "p99")  # bench/bundle/summary_stats.py distribution
# per-repeat numbers that identify the repeat or its server, never measured: not aggregated, kept when invalid
SKIP_AGG = frozenset({"repeat", "concurrency", "server_start_time", "restarts_before", "restarts_after", "pid_before",
                      "pid_after"})
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
    chunks: int | None = None
    client_cpu_us_per_chunk: Num = None
    server_start_time: Num = None
    restarts_before: int | None = None
    restarts_after: int | None = None
    tune_phase: str | None = None
    tune_round: int | None = None

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
        for key in ("tune_phase", "tune_round"):  # only a tune bundle's repeats have them
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
        return RepeatSummary.model_validate({**self.to_json(), **gone, "accept_length_source": None})


class Spread(BaseModel):
    """One number of a level across its valid repeats: `value` (the mean; the sum for counts), `mean`, `sd`
    (sample); on disk as `<name>`, `<name>_mean` and `<name>_sd`."""

    model_config = ConfigDict(frozen=True)
    value: int | float | None = None
    mean: int | float | None = None
    sd: int | float | None = None


SPREAD_SUFFIXES = (("_mean", "mean"), ("_sd", "sd"))


class Level(_Part):
    """One concurrency level's aggregate (bench/bundle/aggregate.py `aggregate`): per number a Spread (its flat
    keys on disk, each a number or null: a damaged one is named by its key), how many repeats were valid,
    and the accept length's source label."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)
    __pydantic_extra__: dict[str, Num]  # the spreads, and the level's `concurrency`
    accept_length_source: str | None = None
    repeats_valid: int | None = None

    @classmethod
    def of(cls, spreads: Mapping[str, Spread], *, concurrency: int | None = None, repeats_valid: int,
           accept_length_source: str | None) -> Level:
        """The level of these spreads, laid out as on disk."""
        flat: JsonObject = {} if concurrency is None else {"concurrency": concurrency}
        for name, s in spreads.items():
            flat.update({f"{name}_mean": s.mean, f"{name}_sd": s.sd, name: s.value})
        return cls.model_validate({**flat, "accept_length_source": accept_length_source,
                                   "repeats_valid": repeats_valid})

    def spreads(self) -> dict[str, Spread]:
        """Every number of the level by name (a lone `<name>_mean` in an older file reads as that mean)."""
        parts: dict[str, dict[str, Any]] = {}
        for key, v in (self.model_extra or {}).items():
            if key == "concurrency":
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


# the notes a verdict carries (`note`, `accept_note`), which summary.md repeats
TEXTS_DIFFER = ("texts may differ between correct profiles: a reordered all-reduce rounds differently in bf16, "
                "so greedy decoding flips at near-ties; the gate judges log-probabilities, not text")
ADAPTIVE_ACCEPT = (f"accept length reported, not judged, under {ADAPTIVE}: SGLang 0.5.23 counts a 0-step pass as a "
                   "verify of one token (batch_result_processor.py:829-832), so a correct plan reads 1.0 in a 0-step "
                   "tier, as a wrong all-reduce does; the log-probabilities judge it")


class Correctness(_Part):
    """The correctness gate's verdict on a cell (bench/run/correctness.py `gate`); `pending` until judged."""

    status: str | None = None
    reasons: list[str] = []
    exact_match_rate: Num = None  # information only (older bundles: the rule)
    first_divergence: int | None = None
    # besides, as the gate writes them: rule ("logprob"; absent in bundles gated on exact match), logprobs
    # (bench/run/logprob_gate.py GateStats, None without a correctness pass), thresholds, note


LevelKey = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,5}$")]


class Cell(bundle_names.CellNames, BaseModel):
    """One (profile, spec[, EAGLE-3 point]) result: the one record of a cell, for writing and for reading.

    Built once from its measured repeats (bench/run/cell.py `close`), written whole (`to_json`,
    bench/bundle/store.py `write_cell`) and read back as the same type (bench/bundle/store.py `load`). On disk
    the first concurrency level's numbers also stand at the top level (bench predict and older readers
    take them there): `to_json` derives them from `by_concurrency`; reading does not keep them, nor any
    other key this record does not hold."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)
    profile: Name
    spec: Name
    spec_params: SpecParams | None = None  # the point switched to (`bench run --eagle3`); None: the overlay's
    plan_spec_params: SpecParams | None = None  # the point the running plan reported (/plan)
    valid: bool = False
    invalid_reason: str | None = None
    simulated: bool = False
    plan_digest: str | None = None
    setup_digest: str | None = None  # the plan without what is local to a host (bench compare matches it)
    local: dict[str, str] | None = None  # those host-local values (model paths, host, port)
    switch: JsonObject | None = None  # the switch's outcome as the control API answered it
    server: JsonObject | None = None  # the server's version and per-start signals (bench/run/measure.py)
    backends: list[Any] | None = None  # /status's backends, None when never asked
    api: str | None = None
    workload: str | None = None
    num_prompts: int | None = None
    max_tokens: int | None = None
    repeats: int | None = None
    concurrency_levels: list[int] = []
    warmup: int | None = None
    per_repeat: list[RepeatSummary] = []
    requests_file: str | None = None
    by_concurrency: dict[LevelKey, Level] = {}
    correctness: Correctness = Correctness()
    # the most requests the server ran at once (its /server_info, bench/client/server_client.py running_cap): a level
    # above it queued the rest (bench/report/compare.py load_note). None: not reported, or a bundle written before
    # the field existed, which still loads
    max_running_requests: Annotated[int, Field(ge=1)] | None = None

    def ran_at_once(self, concurrency: str | int) -> int | None:
        """How many requests ran at once at this level: the level, or the server's cap below it; None when
        the cap is unknown (then the level is what was sent, and may have queued)."""
        level = int(concurrency)
        return None if self.max_running_requests is None else min(level, self.max_running_requests)

    def level(self, concurrency: str | int) -> Level:
        """The aggregate at one concurrency level (empty when the cell has none there)."""
        return self.by_concurrency.get(str(concurrency)) or Level()

    def first_level(self) -> Level:
        """The first concurrency level's aggregate: the cell's headline numbers."""
        return next(iter(self.by_concurrency.values()), Level())

    def with_correctness(self, verdict: Mapping[str, Any]) -> Cell:
        """The same record judged: `verdict` is the gate's result."""
        return self.model_copy(update={"correctness": Correctness.model_validate(dict(verdict))})

    def to_json(self) -> JsonObject:
        """The file's content: every field, plus the first level's numbers at the top level."""
        data = self.model_dump(mode="json")
        return {**data, **self.first_level().to_json()}


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError(f"number {text[:40]} is out of range")
    return int(text)


def parse(path: Path, text: str | None = None) -> Any:
    """The JSON in `path` (or `text`, read from it), with every number finite; UserError naming the file."""
    try:
        raw = path.read_text(encoding="utf-8") if text is None else text
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); {FIX}") from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); {FIX}") from exc
    try:
        return json.loads(raw, parse_float=strict_json.finite, parse_int=_bounded_int,
                          parse_constant=strict_json.refuse_constant)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); {FIX}") from exc
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}: {exc or 'nested too deep'}; {FIX}") from exc


def check(model: type[M], data: Any, source: str) -> M:
    """`data` as `model`; UserError (exit 2) naming the file and the key when it does not fit."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a JSON object was expected, found {type(data).__name__}; {FIX}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(source, exc, HINTS, FIX) from None
