"""Simulated Chrome traces, shaped like the torch-profiler files SGLang writes on /stop_profile.

SGLang writes ``[<prefix>-]<profile_id>-TP-<rank>.trace.json.gz`` per TP rank into the profile
output dir; so does the stand-in. Each traced forward pass of length ``T`` (the chunk interval) is
split into ``n`` compute kernels and ``n`` all-reduce kernels on one GPU stream, the all-reduces
taking ``trace_comm_fraction * T`` in total. The all-reduce kernel name follows the environment, as
the real kernel choice would: the PCIe IPC custom all-reduce when
``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1``, else an NCCL kernel named after ``NCCL_ALGO``/``NCCL_PROTO``.
Every file, event and name is marked simulated.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

GPU_STREAM = 7

COMPUTE_KERNELS: tuple[str, ...] = (
    "sm120_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_kernel [simulated]",
    "flashinfer::BatchPrefillWithPagedKVCacheKernel [simulated]",
    "fused_moe_kernel [simulated]",
    "RMSNormKernel [simulated]",
)


def allreduce_kernel_name(environ: Mapping[str, str]) -> str:
    """The all-reduce kernel a real run would show, given the profile's environment."""
    if environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1":
        return "cross_device_reduce_1stage<__nv_bfloat16, 8> [simulated custom all-reduce]"
    algo = (environ.get("NCCL_ALGO") or "Ring").split(",")[0].strip().upper() or "RING"
    proto = (environ.get("NCCL_PROTO") or "LL").split(",")[0].strip().upper() or "LL"
    return f"ncclDevKernel_AllReduce_Sum_bf16_{algo}_{proto}(ncclDevKernelArgsStorage<4096ul>) [simulated]"


def build_trace(
    pass_windows_us: Sequence[tuple[float, float]],
    rank: int,
    comm_fraction: float,
    allreduces_per_pass: int,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """A Chrome trace for one TP rank; ``pass_windows_us`` are (start, duration) of each forward pass."""
    ar_name = allreduce_kernel_name(environ)
    events: list[dict[str, Any]] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": rank,
            "tid": 0,
            "args": {"name": f"GPU {rank} (simulated)"},
        },
        {
            "ph": "M",
            "name": "thread_name",
            "pid": rank,
            "tid": GPU_STREAM,
            "args": {"name": f"stream {GPU_STREAM}"},
        },
    ]
    n = allreduces_per_pass
    for index, (start, duration) in enumerate(pass_windows_us):
        comm = duration * comm_fraction / n
        compute = duration * (1.0 - comm_fraction) / n
        t = start
        for i in range(n):
            for name, dur, cat in (
                (COMPUTE_KERNELS[i % len(COMPUTE_KERNELS)], compute, "kernel"),
                (ar_name, comm, "kernel"),
            ):
                events.append(
                    {
                        "ph": "X",
                        "cat": cat,
                        "name": name,
                        "pid": rank,
                        "tid": GPU_STREAM,
                        "ts": round(t, 3),
                        "dur": round(dur, 3),
                        "args": {"device": rank, "stream": GPU_STREAM, "pass": index, "simulated": True},
                    }
                )
                t += dur
    return {
        "schemaVersion": 1,
        "simulated": True,
        "traceName": f"SIMULATED SGLang stand-in trace, TP rank {rank}",
        "displayTimeUnit": "ms",
        "deviceProperties": [{"id": rank, "name": "simulated GPU"}],
        "traceEvents": events,
    }


def trace_filename(profile_id: str, rank: int, prefix: str | None = None) -> str:
    """SGLang's file naming for one TP rank."""
    return (f"{prefix}-" if prefix else "") + f"{profile_id}-TP-{rank}.trace.json.gz"


def write_traces(
    output_dir: Path,
    profile_id: str,
    prefix: str | None,
    tp_size: int,
    pass_windows_us: Sequence[tuple[float, float]],
    comm_fraction: float,
    allreduces_per_pass: int,
    environ: Mapping[str, str],
) -> list[Path]:
    """Write one gzipped trace per TP rank (temp file, then rename) and return their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for rank in range(max(1, tp_size)):
        trace = build_trace(pass_windows_us, rank, comm_fraction, allreduces_per_pass, environ)
        target = output_dir / trace_filename(profile_id, rank, prefix)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(trace).encode()))
        os.replace(tmp, target)
        written.append(target)
    return written
