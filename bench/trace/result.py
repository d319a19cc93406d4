"""The records of a trace's analysis (bench/trace/analyse.py): per collective, per step, per device and stream,
and the whole result that `bench trace --json` writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench import JsonObject


@dataclass(frozen=True)
class CallStats:
    """The calls of one collective (or family, or host op): how many, and their duration in µs."""

    count: int = 0
    mean_us: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    total_us: float = 0.0


@dataclass(frozen=True)
class StepRecord:
    """One step (a CPU step range, or a GPU annotation without one) and what ran in it."""

    kind: str
    name: str
    cpu_ms: float
    gpu_window_ms: float
    gpu_busy_ms: float
    comm_ms: float
    allreduces: int
    broadcasts: int
    allgathers: int
    comm_kernels: int
    host_allreduces: int
    host_comm_ms: float


@dataclass(frozen=True)
class StepSummary:
    """The steps of one kind: means per step, communication share, collectives per step."""

    steps: int
    mean_cpu_ms: float
    mean_gpu_window_ms: float
    mean_gpu_busy_ms: float
    mean_comm_ms: float
    comm_share: float | None
    allreduces_per_step: float
    broadcasts_per_step: float
    allgathers_per_step: float
    host_allreduces_per_step: float
    steps_left_out: int


@dataclass(frozen=True)
class StreamTimeline:
    stream: Any  # the trace's tid, as it names it
    kernels: int
    busy_ms: float
    comm_ms: float


@dataclass(frozen=True)
class DeviceTimeline:
    """One device's GPU timeline: span, busy, communication and idle time, its idle gaps, its streams."""

    device: Any  # the trace's pid, as it names it
    span_ms: float
    busy_ms: float
    comm_ms: float
    idle_ms: float
    idle_gaps: int
    largest_gap_us: float
    streams: list[StreamTimeline]


@dataclass(frozen=True)
class TraceResult:
    """The analysis of one trace (module docstring); `to_json` is `bench trace --json`'s output."""

    source: str  # "gpu", "host" or "none": where the communication figures come from
    step_marker_tier: int | None
    kernels: int
    comm_kernels: int
    allreduce: CallStats
    broadcast: CallStats
    allgather: CallStats
    comm_by_op: dict[str, CallStats]
    comm_by_family: dict[str, CallStats]
    host_allreduce: CallStats
    host_broadcast: CallStats
    host_allgather: CallStats
    devices: list[DeviceTimeline]
    steps: dict[str, StepSummary]
    step_records: list[StepRecord]
    verdict: str = ""
    file: str | None = None  # the trace file, when read from one

    def to_json(self) -> JsonObject:
        data = asdict(self)
        file = data.pop("file")
        return data if file is None else {"file": file, **data}

