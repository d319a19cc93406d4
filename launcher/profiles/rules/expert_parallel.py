"""Expert parallelism through DeepEP: what its all-to-all needs from the host."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


def deepep_needs_rdma_nic(ctx: Context) -> Iterator[Finding]:
    """DeepEP low-latency kernels reach every rank through IBGDA, within one host too (DeepEP legacy.py)."""
    if not str(ctx.server.get("moe-a2a-backend", "none")).startswith("deepep"):
        return
    key = "server.moe-a2a-backend"
    nics = ctx.facts.rdma_nics if ctx.facts is not None else None
    if nics == []:
        yield ctx.finding(
            "ineligible", "deepep_needs_rdma_nic", key,
            "DeepEP's low-latency mode sends tokens through RDMA (IBGDA) even between GPUs of one host "
            "(DeepEP deep_ep/buffers/legacy.py:104-110, 561-563), and `launcher doctor` found no RDMA NIC; "
            "use the ep profile (NCCL all-to-all) instead",
        )
    elif nics is None:
        yield ctx.finding("requires", "deepep_needs_rdma_nic", key, "an RDMA NIC (mlx5 / InfiniBand) for DeepEP's IBGDA")
    if ctx.is_pcie():
        yield ctx.finding(
            "warning", "deepep_needs_rdma_nic", key,
            "DeepEP warns that PCIe peer connections may give memory-ordering errors in low-latency mode "
            "(deep_ep/buffers/legacy.py:56); check answers with `make bench` (correctness) before trusting it",
        )


def deepep_normal_mode(ctx: Context) -> Iterator[Finding]:
    """(f) DeepEP normal mode needs NVLink (DeepEP#216) and disables CUDA graphs (moe_hook.py:384)."""
    if not str(ctx.server.get("moe-a2a-backend", "none")).startswith("deepep"):
        return
    if ctx.server.get("deepep-mode", "auto") != "normal":
        return
    pcie = ctx.is_pcie()
    msg = "DeepEP normal mode needs NVLink and turns CUDA graphs off; use deepep-mode = \"low_latency\""
    if pcie:
        yield ctx.finding("error", "deepep_normal_mode", "server.deepep-mode", msg)
    else:
        yield ctx.finding("warning", "deepep_normal_mode", "server.deepep-mode", "DeepEP normal mode disables CUDA graphs")
        if pcie is None:
            yield ctx.finding("requires", "deepep_normal_mode", "server.deepep-mode", "an NVLink host (DeepEP normal mode)")
