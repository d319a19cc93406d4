"""The records `bench allreduce` passes between its parts, each read and written through one model.

- `RunSettings`: what every backend of one command runs with (the parent's flags, the profile's env).
- `RankResult` (with `RankRow`, `ExactCheck`, `CallCheck`, `FirstWrong`): one rank's `rank<R>.json`,
  written by the worker process and parsed by the parent (`BackendRun`).
- `Verdict` (with `FirstFail`): one backend's exactness verdict (exact.py).
- `ResultRow` (with `ExactSize`): one row of allreduce.json/.csv; the keys a row has are the ones it
  was given (`to_json`), so a skipped row carries no timing keys and a measured one carries `tokens`
  even when it is null. The backend's own facts (`Backend.describe`, versions) are extra keys.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Record(BaseModel):
    """Frozen, no unknown keys; JSON without the fields that are None (absent in the file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class RunSettings(_Record):
    """The settings every backend of one `bench allreduce` runs with (and nccl-tests beside them)."""

    nranks: int
    sizes: list[int]
    dtype: str
    hidden: int
    iters: int
    warmup: int
    graph: bool
    graph_calls: int
    graph_launches: int
    timeout_s: float
    profile: str | None
    profile_env: dict[str, str]
    exact_only: bool = False


# ----- one rank's result: the worker writes it, the parent reads it -------------------------------------


class FirstWrong(_Record):
    """The first element of a result that differs from the exact sum."""

    index: int
    got: str
    expected: int


class Comparison(_Record):
    """One result against the exact sum: wrong elements, a digest of its bytes, the first wrong one."""

    wrong: int
    digest: str
    first: FirstWrong | None = None


class CallCheck(Comparison):
    """One checked call: eager call `n` or graph replay `n` (1-based); `call` is its values' index."""

    mode: Literal["eager", "graph"]
    n: int
    call: int


class ExactCheck(_Record):
    """One size's exact check on one rank, and whether the backend's own path ran."""

    shape: list[int]
    modulus: int
    calls: list[CallCheck]
    wrong: int
    path: str
    path_evidence: str


class RankRow(_Record):
    """One size on one rank: declined (`skipped`), or checked and, unless --exact-only, timed."""

    model_config = ConfigDict(frozen=False)  # the timing pass adds its figures to the checked row

    size_B: int
    count: int
    skipped: str | None = None
    exact: ExactCheck | None = None
    wrong: int | None = None
    mean_us: float | None = None
    launch_us: float | None = None
    samples_us: list[float] | None = None
    method: str | None = None


class RankResult(_Record):
    """One rank's `rank<R>.json`: its rows, or why the backend is unavailable here."""

    rank: int
    status: Literal["ok", "unavailable"]
    reason: str | None = None
    rows: list[RankRow] = []
    versions: dict[str, str | None] = {}
    env_applied: dict[str, str] = {}


class BackendRun(_Record):
    """Outcome of one backend: per-rank results, or why there are none."""

    status: Literal["ok", "unavailable", "failed"]
    reason: str = ""
    ranks: list[RankResult] = []


# ----- one backend's exactness verdict -------------------------------------------------------------------


class FirstFail(_Record):
    """The first failed check: a wrong element (rank, index, got, expected) or ranks with other bits."""

    backend: str
    size_B: int
    shape: list[int]
    mode: str
    call: int
    rank: int | None = None
    index: int | None = None
    got: str | None = None
    expected: int | None = None
    text: str


class Verdict(_Record):
    """PASS, FAIL or `not run`, its text, and what was checked (absent when nothing was)."""

    verdict: Literal["not run", "PASS", "FAIL"]
    text: str
    first_wrong: FirstFail | None = None
    path: str | None = None
    sizes_checked: list[int] | None = None
    sizes_declined: list[int] | None = None
    calls: int | None = None
    graph_replays: int | None = None


# ----- the rows of allreduce.json ------------------------------------------------------------------------


class ExactSize(_Record):
    """What the exact check found at one size, over every rank."""

    calls: int
    wrong: int
    identical: bool
    path: list[str]


class ResultRow(BaseModel):
    """One row of allreduce.json: one backend (or nccl-tests) at one size, or the backend skipped/failed."""

    model_config = ConfigDict(frozen=True, extra="allow")

    backend: str
    profile: str | None
    nranks: int
    graph: bool
    type: str
    status: Literal["ok", "skipped", "failed", "checked"]
    reason: str | None = None
    exact: str | None = None
    exact_first_wrong: FirstFail | None = None
    size_B: int | None = None
    count: int | None = None
    tokens: int | None = None
    exact_size: ExactSize | None = None
    time_us: float | None = None
    time_us_per_rank: list[float] | None = None
    host_launch_us: float | None = None
    time_us_p50: float | None = None
    time_us_p99: float | None = None
    time_us_sample_mean: float | None = None
    time_us_sample_sd: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    wrong: int | None = None
    samples: int | None = None
    method: str | None = None
    floor_us: float | None = None
    floor_link: str | None = None
    device: str | None = None
    torch: str | None = None
    nccl: str | None = None
    env: dict[str, str] | None = None
    out_of_place_time_us: float | None = None
    log: str | None = None
    nccl_tests_time_us: float | None = None
    kit_over_nccl_tests: float | None = None

    def has(self, name: str) -> bool:
        """Whether the row was given this key (a null one included), as its JSON will show."""
        return name in self.model_fields_set

    def to_json(self) -> dict[str, Any]:
        """The row as allreduce.json holds it: the keys it was given, nothing else."""
        return self.model_dump(mode="json", exclude_unset=True)
