"""The types of a results bundle's files, and the checks every file passes before anything is read.

`Cell` is the one record of a (profile, spec[, point]) result, the type `bench run` and `bench tune`
write and `bench report`, `compare` and `plots` read: its repeats are `RepeatSummary` records, its levels
`Level` records (bench/bundle/cell_numbers.py). `Manifest` is the manifest as its readers use it. A request
row is read as the record that measured it (bench/client/request_record.py `RequestRecord`).

A bundle is a folder of files anyone can edit, copy or damage. Every field the summaries, plots
and comparisons use is checked here for its type (strict: "12.5" is not a number; the field types:
bench/bundle/strict_types.py), numbers must be finite (1e999, NaN and Infinity are refused when the
JSON is parsed), and names must follow the profile name rule, since they become file names. A damaged
file is a UserError (exit 2) naming the file and the key, never a traceback. Manifest fields nobody
reads are left alone, and a cell file's keys its record does not hold are not read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bench import JsonObject
from bench.bundle import names as bundle_names
from bench.bundle.acceptance import Acceptance
from bench.bundle.cell_numbers import Level, RepeatSummary
from bench.bundle.strict_types import Num, Part
from bench.client.arrivals import rate_text
from launcher import strict_json
from launcher.errors import UserError, schema_error
from launcher.profiles import policy
from launcher.profiles.adaptive_tiers import SPEC_MODE as ADAPTIVE
from launcher.profiles.spec_params import SpecParams

Name = Annotated[str, StringConstraints(pattern=f"^{policy.NAME_PATTERN}$")]
M = TypeVar("M", bound=BaseModel)

FIX = "rerun `bench run`, or restore the file from the bundle's original copy"
HINTS = {
    "float_type": "give a number (not a string) or null; " + FIX,
    "int_type": "give a whole number (not a string); " + FIX,
    "string_pattern_mismatch": "names are 1-64 lowercase letters, digits, '.', '_' or '-'; " + FIX,
}


class _Gpu(Part):
    name: str


class _Host(Part):
    """The host's fingerprint (launcher/doctor/fingerprint.py): what the summary and `bench compare` read."""

    available: bool | None = None
    gpus: list[_Gpu] = []
    driver: str | None = None
    nccl: str | None = None
    interconnect: str | None = None
    reason: str | None = None


class _Kit(Part):
    version: str | None = None
    git_sha: str | None = None
    image_id: str | None = None


class _Server(Part):
    url: str | None = None
    sglang_version: str | None = None


class _Settings(Part):
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


class _Gate(Part):
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
        """One setting by its name (GATE_SETTINGS in bench/report/gate_sides.py); None when the bundle has none."""
        value = getattr(self, key, None) if key in type(self).model_fields else (self.model_extra or {}).get(key)
        return value


class Energy(Part):
    """Whether the run measured GPU energy (bench/client/power.py), over how many GPUs, or why not."""

    measured: bool = False
    gpus: int | None = None
    reason: str | None = None


class Manifest(Part):
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
    energy: Energy | None = None  # None: a bundle written before the bench measured energy

    @property
    def levels(self) -> list[int]:
        """The concurrency levels measured, in order (at least one)."""
        return list(self.settings.concurrency) or [1]


# the notes a verdict carries (`note`, `accept_note`), which summary.md repeats
TEXTS_DIFFER = ("texts may differ between correct profiles: a reordered all-reduce rounds differently in bf16, "
                "so greedy decoding flips at near-ties; the gate judges log-probabilities, not text")
ADAPTIVE_ACCEPT = (f"accept length reported, not judged, under {ADAPTIVE}: SGLang 0.5.23 counts a 0-step pass as a "
                   "verify of one token (batch_result_processor.py:829-832), so a correct plan reads 1.0 in a 0-step "
                   "tier, as a wrong all-reduce does; the log-probabilities judge it")


class Correctness(Part):
    """The correctness gate's verdict on a cell (bench/run/correctness.py `gate`); `pending` until judged. Frozen: a
    caller that words it otherwise (an invalid run, a missing reference) makes a new one (`model_copy(update=...)`)."""

    model_config = ConfigDict(**Part.model_config, frozen=True)
    status: str | None = None
    reasons: list[str] = []
    exact_match_rate: Num = None  # information only (older bundles: the rule)
    first_divergence: int | None = None
    # besides, as the gate writes them: rule ("logprob"; absent in bundles gated on exact match), logprobs
    # (bench/run/logprob_gate.py GateStats, None without a correctness pass), thresholds, note


LevelKey = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,5}$")]
RateKey = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$", max_length=24)]  # arrivals.rate_text


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
    rate_levels: list[Annotated[float, Field(gt=0)]] = []  # the open-loop rates measured (`--request-rate`), req/s
    by_rate: dict[RateKey, Level] = {}  # each rate's aggregate, keyed by bench/client/arrivals.py rate_text
    # per level, acceptance by draft position (bench/bundle/acceptance.py), for levels whose valid repeats carried
    # correct-drafts histograms; absent on disk when empty (no speculation, an invalid cell, an older bundle)
    acceptance: dict[LevelKey, Acceptance] = {}
    acceptance_by_rate: dict[RateKey, Acceptance] = {}  # the same at each open-loop rate (`by_rate`'s keys)
    correctness: Correctness = Correctness()
    # the most requests the server ran at once (its /server_info, bench/client/server_answers.py running_cap): a level
    # above it queued the rest (bench/report/deltas.py load_note). None: not reported, or a bundle written before
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

    def rate_level(self, rate: float) -> Level:
        """The aggregate at one open-loop rate (empty when the cell has none there)."""
        return self.by_rate.get(rate_text(rate)) or Level()

    def first_level(self) -> Level:
        """The first concurrency level's aggregate: the cell's headline numbers."""
        return next(iter(self.by_concurrency.values()), Level())

    def with_correctness(self, verdict: Correctness) -> Cell:
        """The same record judged: `verdict` is the gate's result."""
        return self.model_copy(update={"correctness": verdict})

    def to_json(self) -> JsonObject:
        """The file's content: every field, plus the first level's numbers at the top level."""
        data = self.model_dump(mode="json")
        for key in ("acceptance", "acceptance_by_rate", "rate_levels", "by_rate"):  # absent unless measured: older readers see no change
            if not data[key]:
                del data[key]
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
