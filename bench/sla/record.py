"""sla.json: what `bench sla` found, one typed record (`SlaRecord`): the targets, the search's range and precision,
and per cell its probes (rate, met, pooled p99s), its max rate, its bracket, its correctness and, for an EAGLE-3
cell, whether speculation helps against the same profile's `off` cell.

A probe's numbers come from the cell's request rows at its rate (bench/bundle/aggregate.py `request_percentiles` at the rate:
p99 TTFT and p99 TPOT over the ok requests of its valid repeats, pooled) and its level's aggregate (output tok/s,
the mean over its repeats). Per-user tok/s is the median per-request output tok/s over the same pooled requests.

Speculation helps (`Helps`) when the EAGLE-3 cell's max rate is higher than `off`'s. "Below --rate-min" counts as
the lowest, "at least --rate-max" as the highest; both cells at the same edge, or at the same rate, say nothing
(None). Beside it, the per-user tok/s ratio (eagle3 / off) at the lower of the two max rates, when both cells
probed that very rate (the searches start from the same rate and double alike, so they often share one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import summary_stats as stats
from bench.bundle.cell_numbers import RepeatSummary
from bench.client.request_record import RequestRecord
from bench.sla.search import Outcome
from launcher.profiles.spec_params import SpecParams

FILE = "sla.json"
VERSION = 1
OFF, EAGLE3 = "off", "eagle3"
CellStatus = Literal["found", "below_min", "at_max", "invalid"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)


class Targets(_Record):
    ttft_p99_ms: float
    tpot_p99_ms: float


class Probe(_Record):
    """One probed rate: whether it met both targets (None: the probe was invalid, `invalid_reason` says why), its
    pooled p99s, its output tok/s and per-user tok/s."""

    rate: float
    met: bool | None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    output_tps: float | None = None
    per_user_tps: float | None = None
    tokens_per_joule: float | None = None  # output tokens per joule of every GPU, where NVML answered
    repeats_valid: int = 0
    invalid_reason: str | None = None


class Helps(_Record):
    """An EAGLE-3 cell against its profile's `off` cell: `helps` (None: cannot say), and the per-user tok/s ratio
    eagle3 / off at `common_rate`, the lower of the two max rates, when both probed it."""

    against: str
    helps: bool | None
    why: str
    common_rate: float | None = None
    per_user_ratio: float | None = None


class CellSla(_Record):
    """One cell's search: its probes in the order measured, what they found, and its correctness verdict."""

    cell: str
    profile: str
    spec: str
    spec_params: SpecParams | None = None
    status: CellStatus
    max_request_rate: float | None = None
    bracket: list[float | None] = [None, None]  # [highest rate that met, lowest that failed]
    probes: list[Probe] = []
    invalid_reason: str | None = None
    correctness: str | None = None
    speculation: Helps | None = None

    @property
    def at_max(self) -> Probe | None:
        """The probe at the max rate."""
        return next((p for p in self.probes if p.rate == self.max_request_rate), None)

    def probe_at(self, rate: float) -> Probe | None:
        return next((p for p in self.probes if p.rate == rate and p.met is not None), None)


class SlaRecord(_Record):
    version: int = VERSION
    targets: Targets
    precision: float
    rate_start: float
    rate_min: float
    rate_max: float
    burstiness: float
    simulated: bool = False
    energy_note: str | None = None  # why there is no tok/J (the manifest's energy reason), None when measured
    cells: list[CellSla] = []

    def to_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def judge(rate: float, repeats: Sequence[RepeatSummary], rows: Iterable[RequestRecord], expected: int,
          targets: Targets, output_tps: float | None, joules_per_token: float | None = None) -> Probe:
    """The probe at `rate` from the cell's repeats and request rows: invalid when a repeat at it is (failed
    requests, a restarted server) or fewer than `expected` ran; else met when both pooled p99s are at or under the
    targets (a TPOT not measured, replies of one token, counts as met, as the goodput objective counts it)."""
    mine = [r for r in repeats if r.request_rate == rate]
    bad = [r for r in mine if not r.valid]
    if bad or len(mine) < expected:
        why = bad[0].invalid_reason if bad else f"only {len(mine)} of {expected} repeats ran"
        return Probe(rate=rate, met=None, repeats_valid=len(mine) - len(bad), invalid_reason=why)
    rows = [r for r in rows if r.request_rate == rate]
    pooled = bundle_aggregate.request_percentiles(rows, mine, None, rate)
    good = {r.repeat for r in mine}
    per_user = stats.percentile([r.output_tps for r in rows if r.ok is True and r.repeat in good], 50)
    ttft, tpot = pooled["ttft_p99_ms"], pooled["tpot_p99_ms"]
    met = ttft is not None and ttft <= targets.ttft_p99_ms and (tpot is None or tpot <= targets.tpot_p99_ms)
    return Probe(rate=rate, met=met, ttft_p99_ms=ttft, tpot_p99_ms=tpot, output_tps=output_tps,
                 per_user_tps=per_user, repeats_valid=len(mine),
                 tokens_per_joule=1 / joules_per_token if joules_per_token else None)


def cell_result(*, cell: str, profile: str, spec: str, spec_params: SpecParams | None, probes: list[Probe],
                outcome: Outcome | None, invalid_reason: str | None) -> CellSla:
    """A cell's entry: invalid (with its reason: the cell's own, or its invalid probe's) or what the search found."""
    if invalid_reason is None:
        invalid_reason = next((f"probe at {p.rate:g} req/s invalid: {p.invalid_reason}" for p in probes
                               if p.met is None), None)
    if invalid_reason is not None or outcome is None:
        return CellSla(cell=cell, profile=profile, spec=spec, spec_params=spec_params, status="invalid",
                       probes=probes, invalid_reason=invalid_reason or "the search did not finish")
    return CellSla(cell=cell, profile=profile, spec=spec, spec_params=spec_params, status=outcome.status,
                   max_request_rate=outcome.max_rate, bracket=list(outcome.bracket), probes=probes)


def _rank(c: CellSla) -> float:
    """A max rate to compare: below --rate-min as 0, at least --rate-max as infinity."""
    if c.status == "below_min":
        return 0.0
    return math.inf if c.status == "at_max" else float(c.max_request_rate or 0.0)


def helps(spec_cell: CellSla, off: CellSla | None) -> Helps | None:
    """Whether speculation helps `spec_cell` (an eagle3 cell) against `off` (None: its profile has no off cell)."""
    if spec_cell.spec != EAGLE3:
        return None
    if off is None:
        return Helps(against=f"{spec_cell.profile}+{OFF}", helps=None, why="no off cell of this profile measured")
    if "invalid" in (spec_cell.status, off.status):
        return Helps(against=off.cell, helps=None, why="a cell is invalid")
    e, o = _rank(spec_cell), _rank(off)
    common = min(spec_cell.max_request_rate or 0.0, off.max_request_rate or 0.0) or None
    ratio = None
    if common is not None:
        a, b = spec_cell.probe_at(common), off.probe_at(common)
        if a and b and a.per_user_tps and b.per_user_tps:
            ratio = a.per_user_tps / b.per_user_tps
    if e == o:
        why = "both at the same edge of the range" if math.isinf(e) or e == 0 else "the same max rate"
        return Helps(against=off.cell, helps=None, why=why, common_rate=common, per_user_ratio=ratio)
    why = "higher max rate than off" if e > o else "lower max rate than off"
    return Helps(against=off.cell, helps=e > o, why=why, common_rate=common, per_user_ratio=ratio)


def with_comparisons(cells: list[CellSla]) -> list[CellSla]:
    """Every eagle3 cell with its `speculation` against its profile's off cell."""
    offs = {c.profile: c for c in cells if c.spec == OFF and c.spec_params is None}
    return [c.model_copy(update={"speculation": helps(c, offs.get(c.profile))}) if c.spec == EAGLE3 else c
            for c in cells]
