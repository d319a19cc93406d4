"""What a torch-profiler trace says about communication: share of each step, collectives per step, latency.

Collectives are counted by op: all-reduces (the target forward's: 1 embedding + 2 per layer), and beside
them broadcasts (SGLang 0.5.23's 3 un-graphed sampling broadcasts of a verify that is not all greedy,
speculative/eagle_utils.py:803-805) and all-gathers (the logits gather, layers/logits_processor.py:1024-1036):
`bench predict --temperature` counts the same (bench/predict/model.py, step_collectives).

Step markers recognised (CPU `user_annotation` ranges, or their `gpu_user_annotation` mirrors), in
order of preference; only the most specific tier present in the trace is used, so steps never nest:
1. SGLang 0.5.23's per-forward spans `step[VERIFY bs=..]`, `step[DECODE ..]`, `step[DRAFT ..]`,
   `step[EXTEND ..]`, `step[MIXED ..]`, ... (model_runner.forward, utils/profile_utils.py);
2. its speculative stage spans `verify`, `draft`, `draft_extend` (speculative/spec_utils.py);
3. any other annotation whose name contains verify, decode, draft, prefill/extend, forward, or
   torch.profiler's own `ProfilerStep#N`.
Modes map to kinds: VERIFY/TARGET_VERIFY -> verify, DECODE -> decode, DRAFT* -> draft,
EXTEND/MIXED/SPLIT_PREFILL/PREBUILT -> prefill, IDLE -> ignored.

A GPU kernel belongs to the step whose CPU range contains the runtime call that launched it (matched
through the profiler's correlation id, which also covers cudaGraphLaunch replays); failing that, to
the `gpu_user_annotation` range of a step that contains its start on the same device (and through
its "External id" to the CPU range it mirrors).

Per step: GPU window = first kernel start to last kernel end; busy = union of kernel intervals;
communication = union of communication-kernel intervals; idle = window - busy; communication share =
communication / window. When a trace has no communication kernels but has host-side collective ops
(CPU-only gloo traces, NCCL with one rank), the same figures come from the host ops' durations inside
the step's CPU range, and the result says so; steps without host collective ops (replayed from a
CUDA graph) are then left out of the means and counted in `steps_left_out`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from bench.trace.classify import (
    HOST_ALLGATHER_OPS,
    HOST_ALLREDUCE_ANNOTATIONS,
    HOST_ALLREDUCE_OPS,
    HOST_BROADCAST_OPS,
)
from bench.trace.load import TraceEvent
from bench.trace.result import (
    CallStats,
    DeviceTimeline,
    StepRecord,
    StepSummary,
    StreamTimeline,
    TraceResult,
)
from bench.trace.spans import (
    ANNOTATION_CATS,
    GpuEvent,
    Span,
    SpanIndex,
    collect,
    merge_intervals,
    step_spans,
    union_length,
)
from bench.trace.verdict import verdict

GAP_US = 5.0  # idle gaps shorter than this are launch jitter, not counted as gaps


def _stats(values: list[float]) -> CallStats:
    if not values:
        return CallStats()
    arr = np.asarray(values, dtype=float)
    return CallStats(
        count=int(arr.size),
        mean_us=round(float(arr.mean()), 3),
        p50_us=round(float(np.percentile(arr, 50)), 3),
        p99_us=round(float(np.percentile(arr, 99)), 3),
        total_us=round(float(arr.sum()), 3),
    )



def _host_allreduces(cpu: list[TraceEvent]) -> list[TraceEvent]:
    ops = [e for e in cpu if e["cat"] == "cpu_op" and e.get("name") in HOST_ALLREDUCE_OPS]
    if ops:
        return ops
    return [
        e
        for e in cpu
        if e["cat"] in ANNOTATION_CATS and HOST_ALLREDUCE_ANNOTATIONS.match(str(e.get("name", "")))
    ]


def _device_timelines(kernels: list[GpuEvent]) -> list[DeviceTimeline]:
    devices: dict[Any, list[GpuEvent]] = {}
    for k in kernels:
        devices.setdefault(k.pid, []).append(k)
    out = []
    for pid, ks in sorted(devices.items(), key=lambda kv: str(kv[0])):
        busy = merge_intervals([(k.ts, k.end) for k in ks])
        span = busy[-1][1] - busy[0][0]
        gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:], strict=False) if b[0] - a[1] >= GAP_US]
        comm = union_length([(k.ts, k.end) for k in ks if k.cls.is_comm])
        streams: dict[Any, list[GpuEvent]] = {}
        for k in ks:
            streams.setdefault(k.tid, []).append(k)
        busy_len = sum(e - s for s, e in busy)
        out.append(
            DeviceTimeline(
                device=pid,
                span_ms=round(span / 1000, 3),
                busy_ms=round(busy_len / 1000, 3),
                comm_ms=round(comm / 1000, 3),
                idle_ms=round((span - busy_len) / 1000, 3),
                idle_gaps=len(gaps),
                largest_gap_us=round(max(gaps), 3) if gaps else 0.0,
                streams=[
                    StreamTimeline(
                        stream=tid,
                        kernels=len(sk),
                        busy_ms=round(union_length([(k.ts, k.end) for k in sk]) / 1000, 3),
                        comm_ms=round(union_length([(k.ts, k.end) for k in sk if k.cls.is_comm]) / 1000, 3),
                    )
                    for tid, sk in sorted(streams.items(), key=lambda kv: str(kv[0]))
                ],
            )
        )
    return out


def _step_record(span: Span) -> StepRecord:
    ks = span.kernels
    window = max(k.end for k in ks) - min(k.ts for k in ks) if ks else 0.0
    return StepRecord(
        kind=span.kind,
        name=span.name,
        cpu_ms=round((span.end - span.ts) / 1000, 4),
        gpu_window_ms=round(window / 1000, 4) if ks else 0.0,
        gpu_busy_ms=round(union_length([(k.ts, k.end) for k in ks]) / 1000, 4) if ks else 0.0,
        comm_ms=round(union_length([(k.ts, k.end) for k in ks if k.cls.is_comm]) / 1000, 4) if ks else 0.0,
        allreduces=sum(1 for k in ks if k.cls.is_allreduce),
        broadcasts=sum(1 for k in ks if k.cls.is_broadcast),
        allgathers=sum(1 for k in ks if k.cls.is_allgather),
        comm_kernels=sum(1 for k in ks if k.cls.is_comm),
        host_allreduces=len(span.host_ops),
        host_comm_ms=round(union_length(span.host_ops) / 1000, 4),
    )


def _summarise_steps(records: list[StepRecord], source: str) -> dict[str, StepSummary]:
    kinds: dict[str, list[StepRecord]] = {}
    for r in records:
        kinds.setdefault(r.kind, []).append(r)
    out = {}
    for kind, all_rs in kinds.items():
        # Host-side figures exist only for steps that issued collectives from the CPU; a step replayed
        # from a CUDA graph issues none, so it is left out of host-based means (and counted).
        rs = [r for r in all_rs if r.host_allreduces] if source == "host" else all_rs
        if not rs:
            continue
        n = len(rs)
        if source == "host":
            denom = sum(r.cpu_ms for r in rs)
            comm = sum(r.host_comm_ms for r in rs)
            ars = sum(r.host_allreduces for r in rs)
        else:
            denom = sum(r.gpu_window_ms for r in rs)
            comm = sum(r.comm_ms for r in rs)
            ars = sum(r.allreduces for r in rs)
        out[kind] = StepSummary(
            steps=n,
            mean_cpu_ms=round(sum(r.cpu_ms for r in rs) / n, 4),
            mean_gpu_window_ms=round(sum(r.gpu_window_ms for r in rs) / n, 4),
            mean_gpu_busy_ms=round(sum(r.gpu_busy_ms for r in rs) / n, 4),
            mean_comm_ms=round(comm / n, 4),
            comm_share=round(comm / denom, 4) if denom > 0 else None,
            allreduces_per_step=round(ars / n, 3),
            broadcasts_per_step=round(sum(r.broadcasts for r in rs) / n, 3),
            allgathers_per_step=round(sum(r.allgathers for r in rs) / n, 3),
            host_allreduces_per_step=round(sum(r.host_allreduces for r in rs) / n, 3),
            steps_left_out=len(all_rs) - n,
        )
    return out


def analyse_events(events: list[TraceEvent], file: str | None = None) -> TraceResult:
    """The full analysis (see module docstring for the definitions); `file`: the trace file it came from."""
    kernels, launches, cpu = collect(events)
    host_spans, gpu_spans, tier = step_spans(cpu)
    host_index, gpu_index = SpanIndex(host_spans), SpanIndex(gpu_spans)
    for k in kernels:
        span = None
        launch = launches.get(k.corr) if k.corr is not None else None
        if launch is not None:
            span = host_index.find(launch[0], launch[1], launch[2])
        if span is None and gpu_spans:
            gpu_span = gpu_index.find(k.pid, k.tid, k.ts, any_tid=True)
            span = (gpu_span.partner or gpu_span) if gpu_span is not None else None
        if span is not None:
            span.kernels.append(k)
    host_ar = _host_allreduces(cpu)
    for op in host_ar:
        span = host_index.find(op.get("pid"), op.get("tid"), op["ts"])
        if span is None:  # process-group work threads: any thread of the same process
            span = host_index.find(op.get("pid"), op.get("tid"), op["ts"], any_tid=True)
        if span is not None:
            span.host_ops.append((op["ts"], op["ts"] + op["dur"]))

    comm_kernels = [k for k in kernels if k.cls.is_comm]
    source = "gpu" if comm_kernels else ("host" if host_ar else "none")
    steps = host_spans + [s for s in gpu_spans if s.partner is None]
    records = [_step_record(s) for s in steps if s.kernels or s.host_ops or source == "host"]
    families: dict[str, list[float]] = {}
    for k in comm_kernels:
        families.setdefault(k.cls.family, []).append(k.dur)
    ar_durations = [k.dur for k in comm_kernels if k.cls.is_allreduce]
    ops: dict[str, list[float]] = {}
    for k in comm_kernels:
        ops.setdefault(k.cls.op, []).append(k.dur)
    host_other = [e for e in cpu if e["cat"] == "cpu_op"]
    result = TraceResult(
        source=source,
        step_marker_tier=tier,
        kernels=len(kernels),
        comm_kernels=len(comm_kernels),
        allreduce=_stats(ar_durations),
        broadcast=_stats([k.dur for k in comm_kernels if k.cls.is_broadcast]),
        allgather=_stats([k.dur for k in comm_kernels if k.cls.is_allgather]),
        comm_by_op={op: _stats(d) for op, d in sorted(ops.items())},
        comm_by_family={f: _stats(d) for f, d in sorted(families.items())},
        host_allreduce=_stats([op["dur"] for op in host_ar]),
        host_broadcast=_stats([e["dur"] for e in host_other if e.get("name") in HOST_BROADCAST_OPS]),
        host_allgather=_stats([e["dur"] for e in host_other if e.get("name") in HOST_ALLGATHER_OPS]),
        devices=_device_timelines(kernels) if kernels else [],
        steps=_summarise_steps(records, "host" if source == "host" else "gpu"),
        step_records=records,
        file=file,
    )
    return replace(result, verdict=verdict(result))

