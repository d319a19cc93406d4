"""The records `bench predict` writes (its `--json` output) and reads (AIConfigurator's answer), one model each.

Fields without a default are in every record; those with one appear in the JSON only when they were
given (`to_json`): a scenario's `target`, a bundle row's `note` or its predicted figures, the
prediction's `aic` and `bundle`. The all-reduce tables are parsed from the probe's answer
(aic_probe.py, which runs under AIConfigurator's own Python and so cannot import these).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The record as `--json` prints it: the keys it was given, in the order declared here."""
        return self.model_dump(mode="json", exclude_unset=True)


# ----- the cost model's figures (model.py) ---------------------------------------------------------------


class Target(_Record):
    """The verify budget that reaches a target tok/s, and the all-reduce latency it leaves (None: it cannot
    tell, or no latency is fast enough); `answer` says which in words."""

    target_tokps: float
    verify_budget_ms: float
    allreduce_us_needed: float | None
    answer: str


class Scenario(_Record):
    """One verify time's predictions: cycle, spec tok/s, speed-up and break-even against the baseline."""

    label: str
    allreduce_us: float | None
    allreduce_source: str
    verify_ms: float
    decode_collectives: int | None
    verify_collectives: int
    decode_collectives_ms: float | None
    verify_collectives_ms: float | None
    cycle_ms: float
    spec_tokps: float | None
    baseline_tokps: float | None
    breakeven_accept_len: float | None
    speedup: float | None
    target: Target | None = None


class CollectivesUsed(_Record):
    """The step's collectives (model.Collectives), and the decode count the prediction used."""

    layers: int
    layers_source: str
    allreduces: int
    allgathers: int
    broadcasts: int
    decode: int
    verify: int
    temperature: float
    decode_used: int | None
    decode_from: str


# ----- AIConfigurator's answer and the second opinion (aic.py) ----------------------------------------------


class AicPoint(_Record):
    """AIConfigurator's all-reduce latency at one message size (elements), and how its table gave it."""

    elements: int
    us: float
    how: str


class AicTable(_Record):
    """One all-reduce table of the package (nccl, <backend>_graph, <backend>_eager); `missing` when absent."""

    label: str
    file: str
    missing: bool = False
    version: str | None = None
    gpus: dict[str, list[AicPoint]] = {}


class AicTables(_Record):
    """What the installed package's tables say one all-reduce costs, and where its data lives."""

    model_config = ConfigDict(extra="allow")  # the system's own facts (gpu, node) ride along

    tables: list[AicTable]
    system_file: str | None = None
    data_dir: str | None = None
    nccl_version: str | None = None


class RatioRow(_Record):
    """One figure from both models: kit / AIConfigurator, and whether that is outside aic.DISAGREE."""

    what: str
    kit: float | None
    aic: float | None
    ratio: float | None
    verdict: str


class AllreduceOpinion(_Record):
    """Both models' all-reduce latency at one message size and GPU count. `aic_sglang_graph_us` is the
    table of aic.BACKEND's own in-graph all-reduce."""

    phase: str
    elements: int
    size_B: int
    gpus: int
    aic_nccl_us: float | None
    aic_sglang_graph_us: float | None
    kit: str | None
    kit_us: float | None
    vs_nccl: RatioRow


class SecondOpinion(_Record):
    """Both models side by side: step times, their ratio, and all-reduce latency at decode and verify size."""

    aiconfigurator_version: str
    model: str
    model_source: str
    system: str
    backend: str
    tp: int
    isl: int
    osl: int
    nextn: int
    decode_ms: float
    spec_step_ms: float
    verify_over_decode: float
    system_file: str | None
    data_dir: str | None
    nccl_version: str | None
    steps: list[RatioRow]
    allreduce: list[AllreduceOpinion]
    disagree: list[str]


# ----- the prediction (cli.py) -----------------------------------------------------------------------------


class BundleRow(_Record):
    """Predicted vs measured tok/s for one speculative entry of a bundle; `note` when it was not compared."""

    profile: str
    spec: str
    file: str
    valid: bool
    measured_tokps: float | None
    measured_cycle_ms: float | None
    accept_length: float | None
    note: str | None = None
    predicted_verify_ms: float | None = None
    predicted_cycle_ms: float | None = None
    predicted_tokps: float | None = None
    error_pct: float | None = None
    allreduce_source: str | None = None


class Prediction(_Record):
    """Every prediction of one `bench predict`; its JSON carries the first scenario's figures at the top."""

    baseline_tokps: float | None
    inputs: dict[str, str | int | float | bool]
    collectives: CollectivesUsed
    scenarios: list[Scenario]
    aic: SecondOpinion | None = None
    bundle: list[BundleRow] | None = None
    bundle_baseline_tokps: float | None = None
    simulated: bool | None = None

    @property
    def headline(self) -> Scenario | None:
        return self.scenarios[0] if self.scenarios else None

    def to_json(self) -> dict[str, Any]:
        """The first scenario's keys (or null figures without one), then the inputs and the rest."""
        head = self.headline
        top = head.to_json() if head is not None else {
            "verify_ms": None, "spec_tokps": None, "baseline_tokps": self.baseline_tokps, "breakeven_accept_len": None}
        return {**top, **self.model_dump(mode="json", exclude_unset=True, exclude={"baseline_tokps"})}
