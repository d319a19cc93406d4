"""What `bench report` and `bench compare` read from a bundle, checked before anything is read.

A bundle is a folder of files anyone can edit, copy or damage. Every field the summaries, plots
and comparisons use is checked here for its type (strict: "12.5" is not a number), numbers must be
finite (1e999, NaN and Infinity are refused when the JSON is parsed), and names must follow the
profile name rule, since they become file names. A damaged file is a UserError (exit 2) naming
the file and the key, never a traceback. Fields nobody reads are left alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from launcher.errors import UserError, schema_error
from launcher.profiles import policy

Name = Annotated[str, StringConstraints(pattern=f"^{policy.NAME_PATTERN}$")]
Num = float | None  # strict: an int or a float, never a string or a bool

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
    available: bool | None = None
    gpus: list[_Gpu] = []


class _Kit(_Part):
    version: str | None = None
    git_sha: str | None = None
    image_id: str | None = None


class _Settings(_Part):
    concurrency: list[Annotated[int, Field(ge=1)]] = [1]
    fleet_host: str | None = None


class _Gate(_Part):
    min_exact_match: float = 0.9
    collapse_ratio: float = 0.6


class Manifest(_Part):
    complete: bool | None = None
    interrupted: bool | None = None
    simulated: bool | None = None
    kit: _Kit = _Kit()
    host: _Host = _Host()
    server: dict[str, Any] = {}
    settings: _Settings = _Settings()
    gate: _Gate = _Gate()
    matrix: list[str] = []


class _Level(_Part):
    """One concurrency level's aggregate: every value a number or null, but the source's label."""

    __pydantic_extra__: dict[str, Num]
    accept_length_source: str | None = None


class _Correctness(_Part):
    status: str | None = None
    reasons: list[str] = []
    exact_match_rate: Num = None


class _SpecParams(BaseModel):
    """An EAGLE-3 point (`bench run --eagle3`); absent or null in bundles older than points, and for
    the spec overlay's own."""

    model_config = ConfigDict(extra="forbid", strict=True)
    steps: Annotated[int, Field(ge=1)]
    topk: Annotated[int, Field(ge=1)]
    draft_tokens: Annotated[int, Field(ge=1)]


class Cell(_Part):
    profile: Name
    spec: Name
    spec_params: _SpecParams | None = None
    valid: bool | None = None
    by_concurrency: dict[Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,5}$")], _Level] = {}
    correctness: _Correctness = _Correctness()
    switch: dict[str, Any] | None = None
    plan_digest: str | None = None
    setup_digest: str | None = None
    local: dict[str, Any] | None = None
    simulated: bool | None = None


class RequestRow(_Part):
    ok: bool | None = None
    concurrency: int | None = None
    tpot_s: Num = None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError(f"number {text[:40]} is out of range")
    return int(text)


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse(path: Path, text: str | None = None) -> Any:
    """The JSON in `path` (or `text`, read from it), with every number finite; UserError naming the file."""
    try:
        raw = path.read_text(encoding="utf-8") if text is None else text
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); {FIX}") from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); {FIX}") from exc
    try:
        return json.loads(raw, parse_float=_finite, parse_int=_bounded_int, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); {FIX}") from exc
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}: {exc or 'nested too deep'}; {FIX}") from exc


def check(model: type[BaseModel], data: Any, source: str) -> None:
    """UserError (exit 2) naming the file and the key when `data` does not fit `model`."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a JSON object was expected, found {type(data).__name__}; {FIX}")
    try:
        model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(source, exc, HINTS, FIX) from None
