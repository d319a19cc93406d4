"""tune.json: what a tune decided and measured (`TuneFile`), the one record bench/tune/result.py writes and
bench/tune/plot.py, bench/tune/production.py and the winner's profile file read.

The file is read defensively (a person may edit or truncate it): a field of the wrong type, NaN, or a cell that
is not an object reads as absent (None, 0 or dropped), never as an error. Keys this record does not name
(the decision's own fields, the settings, the timings) are kept as they were written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from bench import JsonObject
from launcher.profiles import spec_params
from launcher.profiles.spec_params import SpecParams


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _count(x: Any) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) else 0


def _text(x: Any) -> str | None:
    return None if x is None else str(x)


def _interval(x: Any) -> tuple[float, float] | None:
    if not isinstance(x, list | tuple) or len(x) != 2:
        return None
    lo, hi = _number(x[0]), _number(x[1])
    return None if lo is None or hi is None else (lo, hi)


def _texts(x: Any) -> list[str]:
    return [str(v) for v in x if v not in (None, "")] if isinstance(x, list | tuple) else []


def _part(x: Any) -> Any:
    return x if isinstance(x, Mapping) else None


Number = Annotated[float | None, BeforeValidator(_number)]
Count = Annotated[int, BeforeValidator(_count)]
Text = Annotated[str | None, BeforeValidator(_text)]
Interval = Annotated[tuple[float, float] | None, BeforeValidator(_interval)]
Texts = Annotated[list[str], BeforeValidator(_texts)]
Point = Annotated[SpecParams | None, BeforeValidator(spec_params.lenient)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class CellCorrectness(_Part):
    """A cell's correctness verdict as tune.json keeps it (the gate's status, reasons and figures)."""

    status: Text = None
    reasons: Texts = []


class TuneCell(_Part):
    """One cell of the tune: its status, its screening and final numbers (mean, sd, 95% CI, n), its verdict."""

    label: Text = None
    profile: Text = None
    spec: Text = None
    spec_params: Point = None
    status: Text = None
    reason: Text = None
    role: Text = None
    mean: Number = None
    sd: Number = None
    ci95: Interval = None
    n: Count = 0
    final_mean: Number = None
    final_sd: Number = None
    final_ci95: Interval = None
    final_n: Count = 0
    correctness: Annotated[CellCorrectness | None, BeforeValidator(_part)] = None

    def shown(self) -> tuple[float | None, tuple[float, float] | None, int, str]:
        """(mean, ci95, n, "final"|"screening") to show: the final repeats when there were any; one value has
        no interval."""
        if self.final_n > 0 and self.final_mean is not None:
            return self.final_mean, self.final_ci95 if self.final_n > 1 else None, self.final_n, "final"
        return self.mean, self.ci95 if self.n > 1 else None, self.n, "screening"


class Named(_Part):
    """The running plan or the winner: its label (and, as written, its profile, spec and point)."""

    label: Text = None


class TuneObjective(_Part):
    unit: Text = None
    describe: Text = None


class Power(_Part):
    power_at_gain: Number = None


class TuneDecision(_Part):
    """The decision (bench/tune/decision.py Decision.to_json, with the halving's reason and the finalists)."""

    outcome: Text = None
    rule: Text = None
    chosen: Text = None
    incumbent: Text = None
    tied: Texts = []
    power: Annotated[Power | None, BeforeValidator(_part)] = None
    comparisons: list[JsonObject] = []


def _cells(x: Any) -> list[Any]:
    return [c for c in x if isinstance(c, Mapping | TuneCell)] if isinstance(x, list | tuple) else []


class TuneFile(_Part):
    """tune.json."""

    run_id: Text = None
    complete: bool | None = None
    interrupted: bool | None = None
    simulated: Annotated[bool, BeforeValidator(bool)] = False
    objective: Annotated[TuneObjective, BeforeValidator(lambda x: x if isinstance(x, Mapping) else {})] = TuneObjective()
    incumbent: Annotated[Named | None, BeforeValidator(_part)] = None
    winner: Annotated[Named | None, BeforeValidator(_part)] = None
    cells: Annotated[list[TuneCell], BeforeValidator(_cells)] = []
    decision: Annotated[TuneDecision, BeforeValidator(lambda x: x if isinstance(x, Mapping) else {})] = TuneDecision()
    profile_file: Text = None
    adaptive: JsonObject | None = None

    @classmethod
    def read(cls, data: Any) -> TuneFile:
        """The file's JSON as this record (anything but an object reads as an empty result)."""
        return data if isinstance(data, TuneFile) else cls.model_validate(data if isinstance(data, Mapping) else {})

    def cell(self, label: str) -> TuneCell | None:
        return next((c for c in self.cells if c.label == label), None)

    def to_json(self) -> JsonObject:
        """The file's content (no `adaptive` key for a tune without --adaptive)."""
        data = self.model_dump(mode="json")
        if data.get("adaptive") is None:
            data.pop("adaptive", None)
        return data
