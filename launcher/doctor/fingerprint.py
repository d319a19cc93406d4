"""The host fingerprint a bench bundle carries: the doctor's own facts, so two hosts compare honestly.

Same probes and parsers as `launcher doctor` (nvidia-smi topology, P2P and GPU list, NCCL version);
no checks and no eligibility. Without nvidia-smi the fingerprint says so instead of guessing.
"""

from __future__ import annotations

from typing import Any

from launcher import settings
from launcher.doctor import checks, nccl
from launcher.doctor import facts as facts_mod
from launcher.doctor.probe import Probe
from launcher.errors import KitError

NO_SMI = "nvidia-smi not found where the bench ran: no GPU seen there"


def _nccl(probe: Probe) -> tuple[str | None, str]:
    """KIT_NCCL_VERSION when set (the server image's, for a bench in its own container), else detected here."""
    override = settings.KIT_NCCL_VERSION.get(probe.environ)
    if override:
        return override, settings.KIT_NCCL_VERSION.name
    version, source = probe.nccl_detect()
    return (nccl.fmt(version) if version else None), source


def host_fingerprint(probe: Probe | None = None) -> dict[str, Any]:
    """GPUs, driver, interconnect, NUMA split, P2P, NCCL; `available: false` with the reason when no GPU is seen."""
    probe = probe or Probe()
    nccl_version, nccl_source = _nccl(probe)
    try:
        inp = facts_mod.read_inputs(probe, {})
    except KitError as exc:  # the three nvidia-smi outputs disagree (a GPU fell off the bus between them)
        return {"available": False, "reason": f"nvidia-smi outputs disagree: {exc}", "gpus": [], "driver": None,
                "interconnect": None, "numa_nodes": [], "p2p_ok": None, "nvlink_multicast": None, "rdma_nics": None,
                "nccl": nccl_version, "nccl_source": nccl_source, "topology": None, "sources": {}}
    facts, details = facts_mod.build(inp, nccl_version)
    gpus = [g.model_dump() for g in facts.gpus]
    reason = None
    if not gpus:  # what was seen, without the doctor's advice: a bundle records facts (a SIMULATED one too)
        problems = [NO_SMI if c.detail == checks.nvidia_smi_missing().detail else c.detail for c in inp.checks]
        reason = "; ".join(problems) or NO_SMI
    return {
        "available": bool(gpus),
        "reason": reason,
        "gpus": gpus,
        "driver": gpus[0]["driver_version"] if gpus else None,
        "interconnect": facts.interconnect,
        "numa_nodes": facts.numa_nodes,
        "p2p_ok": facts.p2p_ok,
        "nvlink_multicast": facts.nvlink_multicast,
        "rdma_nics": facts.rdma_nics,
        "nccl": nccl_version,
        "nccl_source": nccl_source,
        "topology": details.get("topology"),
        "sources": details.get("sources", {}),
    }
