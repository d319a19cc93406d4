"""One history entry (a line of history.jsonl, and the body of a /switch answer), built in one place.

The switch, its rollback, the first healthy start and the resolution of a switch cut short all fill
an `Entry`; `to_json` gives the line's object. Its keys are the ones history.jsonl always had (bench,
fleet and the metrics read them): the fields every entry carries, plus the others only once set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from launcher.profiles.adaptive_tiers import PlanTiers
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.core.states import Outcome, Resolution

ALWAYS = frozenset({"ts", "from_", "to", "outcome", "durations", "error"})  # in every entry


class Label(BaseModel):
    """A plan as history, the journal and the /switch answer name it (switch.label): `adaptive_tiers` appears in the
    JSON only when the plan has them (a tuned adaptive config)."""

    model_config = ConfigDict(extra="ignore")
    profile: str
    spec: str
    spec_params: SpecParams | None = None  # the plan's EAGLE point; None when not EAGLE
    digest: str | None = None
    adaptive_tiers: PlanTiers = None  # as the plan holds them; {"B": [steps]} in JSON

    @model_serializer(mode="wrap")
    def _without_absent_tiers(self, dump: SerializerFunctionWrapHandler) -> dict:
        data = dump(self)
        if self.adaptive_tiers is None:
            data.pop("adaptive_tiers", None)
        return data


class Entry(BaseModel):
    """A history entry. Optional fields appear in the JSON only once assigned (or given)."""

    model_config = ConfigDict(populate_by_name=True)
    ts: float = Field(default_factory=time.time)
    id: str | None = None
    from_: Label | None = Field(default=None, alias="from")
    to: Label | None = None
    outcome: Outcome | None = None
    durations: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    backends: list[dict] | None = None
    decode_allreduce: dict | None = None
    failed_step: str | None = None
    log_tail: list[str] | None = None
    rollback_error: str | None = None
    drain_cut_short: str | None = None  # the drain's last reading when its deadline passed (the switch aborted)
    history_error: str | None = None  # the entry could not be appended (the next start records it)
    interrupted_phase: str | None = None
    finished_as: Outcome | None = None
    resolution: Resolution | None = None
    running: Label | None = None
    gate_error: str | None = None
    log_tail_cut: int | None = None  # written by state.append_history: log_tail lines cut to fit one line
    entry_cut: bool | None = None  # likewise: only what says what happened was kept

    def lap(self, step: str, seconds: float) -> None:
        self.durations[f"{step}_s"] = round(seconds, 3)

    def rolled_back(self, result: Rollback) -> None:
        """The rollback's outcome and time, in the one place both go."""
        self.outcome = result.outcome
        if result.error is not None:
            self.rollback_error = result.error
        self.lap("rollback", result.seconds)

    def to_json(self) -> dict:
        if self.outcome == Outcome.UNCHANGED:  # no switch was made: no entry, only the answer's three keys
            return {"outcome": Outcome.UNCHANGED.value, "error": self.error, "durations": dict(self.durations)}
        keys = ALWAYS | self.model_fields_set
        return self.model_dump(mode="json", by_alias=True, include=set(keys))


@dataclass(frozen=True)
class Rollback:
    """What bringing the previous plan back came to: rolled_back, or failed with the reason."""

    outcome: Outcome
    seconds: float
    error: str | None = None
