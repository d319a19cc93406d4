"""Capture a small real torch-profiler trace of a model step with an all-reduce, as a test fixture.

A two-layer stand-in for a tensor-parallel transformer block (RMSNorm, QKV GEMM, attention over a
256-token cache, output GEMM, all-reduce, MLP GEMMs, all-reduce) in bf16, one process, world size 1.
Steps are annotated with SGLang 0.5.23's span names (`step[DECODE bs=1]`, `step[VERIFY bs=1]`) so
the analyser's step logic runs on real profiler output; the verify step is also replayed from a
CUDA graph, as SGLang replays decode/verify. With one rank NCCL launches no communication kernel:
the all-reduces appear as host-side c10d ops only.

    python3 tools/gpu/capture_trace.py OUT.json.gz [--device cuda --backend nccl]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(
        self, hidden: int, heads: int, ffn: int, cache: int, device: torch.device, dtype: torch.dtype
    ):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        kw = {"device": device, "dtype": dtype}
        self.norm1 = torch.nn.RMSNorm(hidden, **kw)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False, **kw)
        self.out = torch.nn.Linear(hidden, hidden, bias=False, **kw)
        self.norm2 = torch.nn.RMSNorm(hidden, **kw)
        self.up = torch.nn.Linear(hidden, 2 * ffn, bias=False, **kw)
        self.down = torch.nn.Linear(ffn, hidden, bias=False, **kw)
        self.k_cache = torch.randn(1, heads, cache, self.head_dim, **kw)
        self.v_cache = torch.randn(1, heads, cache, self.head_dim, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(t, 3, self.heads, self.head_dim).unbind(1)
        k = torch.cat([self.k_cache, k.transpose(0, 1).unsqueeze(0)], dim=2)
        v = torch.cat([self.v_cache, v.transpose(0, 1).unsqueeze(0)], dim=2)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k, v)
        h = self.out(attn.squeeze(0).transpose(0, 1).reshape(t, -1))
        dist.all_reduce(h)  # tensor-parallel reduction after attention
        x = x + h
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        h = self.down(F.silu(gate) * up)
        dist.all_reduce(h)  # and after the MLP
        return x + h


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    device = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16
    with tempfile.TemporaryDirectory() as tmp:
        kwargs = {"device_id": device} if a.backend == "nccl" else {}
        dist.init_process_group(a.backend, init_method=f"file://{tmp}/store", rank=0, world_size=1, **kwargs)
        torch.manual_seed(0)
        layers = torch.nn.Sequential(*[Block(1024, 8, 2048, 256, device, dtype) for _ in range(2)])
        decode_in = torch.randn(1, 1024, device=device, dtype=dtype)
        verify_in = torch.randn(4, 1024, device=device, dtype=dtype)
        with torch.inference_mode():
            for _ in range(3):
                layers(decode_in)
                layers(verify_in)
            graph = None
            if device.type == "cuda":
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    layers(verify_in)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    layers(verify_in)
                torch.cuda.synchronize()
            acts = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(a.steps):
                    with torch.profiler.record_function("step[DECODE bs=1]"):
                        layers(decode_in)
                    with torch.profiler.record_function("step[VERIFY bs=1]"):
                        layers(verify_in)
                if graph is not None:
                    with torch.profiler.record_function("step[VERIFY bs=1]"):
                        graph.replay()
                if device.type == "cuda":
                    torch.cuda.synchronize()
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        dist.destroy_process_group()
        data = json.loads(raw.read_text())
    # Keep the fixture small and free of host details: drop Python stacks and flow arrows.
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in ("python_function", "ac2g")]
    for key in ("host_name", "distributedInfo"):
        data.pop(key, None)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), 9))
    print(f"wrote {out}: {out.stat().st_size} bytes, {len(data['traceEvents'])} events, pid {os.getpid()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
