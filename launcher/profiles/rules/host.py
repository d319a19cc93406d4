"""A profile against the host it would run on: its [requires] and the GPU count."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


def host_requirements(ctx: Context) -> Iterator[Finding]:
    """A profile's [requires] against the host facts, when given."""
    f, req = ctx.facts, ctx.resolved.requires
    if f is None:
        return
    if req.sm and f.sm_versions and not f.sm_versions <= set(req.sm):
        yield ctx.finding("ineligible", "host_requirements", "requires.sm", f"needs SM {', '.join(req.sm)}, host has {', '.join(sorted(f.sm_versions))}")
    if req.interconnect == "nvlink" and f.is_pcie:
        yield ctx.finding("ineligible", "host_requirements", "requires.interconnect", f"needs NVLink, host interconnect is {f.interconnect}")
    if req.interconnect == "pcie" and f.is_pcie is False:
        yield ctx.finding("ineligible", "host_requirements", "requires.interconnect", "tuned for PCIe-only hosts; on NVLink SGLang's own custom all-reduce is the better choice (use baseline)")
    if req.p2p and f.p2p_ok is False:
        pairs = ", ".join(f"GPU{a} and GPU{b}" for a, b in f.p2p_bad_pairs[:3]) or "some GPUs"
        yield ctx.finding("ineligible", "host_requirements", "requires.p2p", f"needs GPU peer-to-peer access; P2P is not OK between {pairs} (see `launcher doctor`)")
    if req.nvlink_multicast and f.nvlink_multicast is False:
        yield ctx.finding("ineligible", "host_requirements", "requires.nvlink_multicast", "needs NVLink multicast, which this host lacks")


def gpu_count(ctx: Context) -> Iterator[Finding]:
    """Tensor/expert parallel sizes larger than the host's GPU count fail at start-up."""
    if ctx.facts is None or not ctx.facts.gpus:
        return
    n = len(ctx.facts.gpus)
    for key in ("tp-size", "ep-size"):
        raw = ctx.server.get(key)
        if isinstance(raw, str) and raw.isdigit() and int(raw) > n:
            yield ctx.finding("ineligible", "gpu_count", f"server.{key}", f"--{key} {raw} needs {raw} GPUs, this host has {n}; export KIT_TP_SIZE={n}")
