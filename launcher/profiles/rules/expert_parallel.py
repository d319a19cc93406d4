"""Expert parallelism through DeepEP: what its all-to-all needs from the host."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


def deepep_low_latency_transport(ctx: Context) -> Iterator[Finding]:
    """DeepEP low-latency mode within one host: P2P between every pair, and an RDMA NIC (docs/evidence.md,
    "DeepEP low-latency within one host").

    SGLang leaves `allow_nvlink_for_low_latency_mode` at True (sglang/srt/layers/moe/token_dispatcher/deepep.py:285-304,
    DeepEP deep_ep/buffers/legacy.py:39), so stores to a peer with an NVSHMEM P2P pointer skip RDMA
    (csrc/kernels/legacy/internode_ll.cu:44-51, 263-272). But low-latency mode still forces IBGDA on
    (NVSHMEM_IB_ENABLE_IBGDA=1, legacy.py:105-110), and the dispatch kernel asserts IBGDA's QP count on
    every launch, P2P or not (internode_ll.cu:284); the maintainer's answer for one 8-GPU host is that
    local transfers use RDMA too (DeepEP#164). So without an RDMA NIC it is more likely broken than
    unproven: ineligible until a run on a NIC-less host shows otherwise.
    """
    if ctx.server.get("moe-a2a-backend", "none") != "deepep" or ctx.server.get("deepep-mode", "auto") == "normal":
        return
    rule, key, f = "deepep_low_latency_transport", "server.moe-a2a-backend", ctx.facts
    # The profile's own `requires.p2p` is checked by host_requirements; say it here only for profiles without it.
    if not ctx.resolved.requires.p2p:
        if f is not None and f.p2p_ok is False:
            pairs = ", ".join(f"GPU{a} and GPU{b}" for a, b in f.p2p_bad_pairs[:3]) or "some GPUs"
            yield ctx.finding(
                "ineligible", rule, key,
                "DeepEP's low-latency kernels write into each peer GPU through NVSHMEM's P2P mapping within a host "
                "(DeepEP deep_ep/buffers/legacy.py:108, csrc/kernels/legacy/internode_ll.cu:263-272), and "
                f"`launcher doctor` found P2P not OK between {pairs}; use the ep profile (NCCL all-to-all) instead",
            )
        elif f is None or f.p2p_ok is None:
            yield ctx.finding("requires", rule, key, "GPU peer-to-peer access between every GPU pair (DeepEP low-latency writes to peers through NVSHMEM P2P)")
    names = sorted({g.name for g in f.gpus if "PCIE" in g.name}) if f is not None else []
    tp = ctx.tp_size()
    if names and (tp is None or tp > 2):
        yield ctx.finding(
            "ineligible", rule, key,
            f"DeepEP's own check_nvlink_connections refuses more than 2 ranks on GPUs whose CUDA name contains "
            f"'PCIE', upper case ({', '.join(names)}: 'PCIe GPUs only have pairwise NVLink connections', DeepEP "
            "deep_ep/utils/envs.py:155-156); use the ep profile",
        )
    nics = f.rdma_nics if f is not None else None
    if nics == []:
        yield ctx.finding(
            "ineligible", rule, key,
            "`launcher doctor` found no RDMA NIC (nvidia-smi topo -m, /sys/class/infiniband), and DeepEP's low-latency "
            "mode forces IBGDA on (NVSHMEM_IB_ENABLE_IBGDA=1, deep_ep/buffers/legacy.py:105-110) and its dispatch "
            "kernel asserts IBGDA's QP count on every launch (csrc/kernels/legacy/internode_ll.cu:284); the "
            "maintainer: local transfers use RDMA too (DeepEP#164); use the ep profile (NCCL all-to-all) instead",
        )
    elif nics is None:
        yield ctx.finding(
            "requires", rule, key,
            "an RDMA NIC (mlx5 or another IBGDA-capable device): DeepEP's low-latency dispatch asserts IBGDA state "
            "even between P2P peers (internode_ll.cu:284; DeepEP#164)",
        )
    if ctx.is_pcie():
        yield ctx.finding(
            "warning", rule, key,
            "DeepEP warns that PCIe peer connections may give memory-ordering errors in low-latency mode "
            "(deep_ep/buffers/legacy.py:56-57); check answers with `make bench` (correctness) before trusting it",
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
