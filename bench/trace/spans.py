"""A torch-profiler trace's events as analysis reads them: GPU kernels (and copies), runtime launches, CPU
annotations and ops, and the step spans of the most specific marker tier present (bench/trace/analyse.py)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from bench.trace.classify import KernelClass, classify_copy, classify_kernel
from bench.trace.load import TraceEvent
from bench.trace.step_names import step_kind

KERNEL_CATS = {"kernel", "gpu_op"}
COPY_CATS = {"gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
ANNOTATION_CATS = {"user_annotation"}
GPU_ANNOTATION_CATS = {"gpu_user_annotation"}


@dataclass
class GpuEvent:
    """One GPU kernel, copy or memset, with the correlation id of the runtime call that launched it."""

    name: str
    pid: Any
    tid: Any
    ts: float
    dur: float
    corr: Any
    cls: KernelClass

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Span:
    """One step range (CPU annotation, or its GPU mirror) and the kernels and host collective ops found in it."""

    name: str
    kind: str
    pid: Any
    tid: Any
    ts: float
    end: float
    ext: Any = None  # the profiler's "External id": links a gpu_user_annotation to its CPU range
    partner: Span | None = None  # for a GPU-side range: the CPU range it mirrors, when known
    kernels: list[GpuEvent] = field(default_factory=list)
    host_ops: list[tuple[float, float]] = field(default_factory=list)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping (start, end) intervals."""
    return sum(e - s for s, e in merge_intervals(intervals))


def merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals merged where they overlap, sorted by start."""
    merged: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def number(x: Any) -> float | None:
    """A trace field as a float, None when it is missing or not a number."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


class SpanIndex:
    """Innermost-span lookup per (pid, tid) by timestamp."""

    def __init__(self, spans: list[Span]) -> None:
        self.by_key: dict[tuple[Any, Any], tuple[list[float], list[Span]]] = {}
        groups: dict[tuple[Any, Any], list[Span]] = {}
        for s in spans:
            groups.setdefault((s.pid, s.tid), []).append(s)
        for key, group in groups.items():
            group.sort(key=lambda s: s.ts)
            self.by_key[key] = ([s.ts for s in group], group)

    def find(self, pid: Any, tid: Any, ts: float, any_tid: bool = False) -> Span | None:
        keys = [k for k in self.by_key if k[0] == pid] if any_tid else [(pid, tid)]
        best: Span | None = None
        for key in keys:
            if key not in self.by_key:
                continue
            starts, group = self.by_key[key]
            i = bisect.bisect_right(starts, ts) - 1
            for j in range(i, max(i - 64, -1), -1):
                if group[j].ts <= ts <= group[j].end:
                    if best is None or group[j].ts > best.ts:
                        best = group[j]
                    break
        return best



def collect(
    events: list[TraceEvent],
) -> tuple[list[GpuEvent], dict[Any, tuple[Any, Any, float]], list[TraceEvent]]:
    """The complete events sorted out: GPU kernels and copies, runtime launches by correlation id (pid, tid, ts),
    and the CPU annotations, GPU annotations and CPU ops (their category lower-cased, ts and dur as floats)."""
    kernels: list[GpuEvent] = []
    launches: dict[Any, tuple[Any, Any, float]] = {}
    cpu: list[TraceEvent] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        ts, dur = number(e.get("ts")), number(e.get("dur"))
        if ts is None or dur is None:
            continue
        args = e.get("args") or {}
        corr = args.get("correlation") if isinstance(args, dict) else None
        name = str(e.get("name", ""))
        if cat in KERNEL_CATS or cat in COPY_CATS:
            cls = classify_kernel(name) if cat in KERNEL_CATS else classify_copy(name)
            kernels.append(GpuEvent(name, e.get("pid"), e.get("tid"), ts, dur, corr, cls))
        elif cat in RUNTIME_CATS:
            if corr is not None:
                launches[corr] = (e.get("pid"), e.get("tid"), ts)
        elif cat in ANNOTATION_CATS or cat in GPU_ANNOTATION_CATS or cat == "cpu_op":
            cpu.append({**e, "cat": cat, "ts": ts, "dur": dur})
    return kernels, launches, cpu


def step_spans(cpu: list[TraceEvent]) -> tuple[list[Span], list[Span], int | None]:
    """CPU step spans and GPU-annotation step spans of the most specific tier present."""
    marked = []
    for e in cpu:
        if e["cat"] not in ANNOTATION_CATS and e["cat"] not in GPU_ANNOTATION_CATS:
            continue
        sk = step_kind(str(e.get("name", "")))
        if sk is None or not sk[1]:
            continue
        marked.append((sk[0], sk[1], e))
    if not marked:
        return [], [], None
    tier = min(t for t, _, _ in marked)
    host, gpu = [], []
    for t, kind, e in marked:
        if t != tier:
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        span = Span(
            str(e["name"]),
            kind,
            e.get("pid"),
            e.get("tid"),
            e["ts"],
            e["ts"] + e["dur"],
            ext=args.get("External id"),
        )
        (gpu if e["cat"] in GPU_ANNOTATION_CATS else host).append(span)
    by_ext = {s.ext: s for s in host if s.ext is not None}
    for s in gpu:
        s.partner = by_ext.get(s.ext) if s.ext is not None else None
    return host, gpu, tier
