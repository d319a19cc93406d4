"""The start-up lines SGLang 0.5.23 logs when a non-NCCL backend comes up, or when it gives one up.

The stand-in prints the line for each backend its argv and environment switch on, as the real
server would (texts from the wheel: launcher/runtime/activation.py lists where). A backend named in
``STANDIN_WITHHOLD_ACTIVATION`` gets SGLang's fallback warning instead: the server still answers
health, as the real one does when it quietly runs NCCL. Every line starts with "SIMULATED".
"""

from __future__ import annotations

from collections.abc import Mapping

from testsupport.standin.server_args import ServerArgs

UP = {
    "fusion": "FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank=0, "
    "world_size={tp}, max_token_num=2048, hidden_dim=7168",
    "pcie-ipc": "FlashInfer PCIe-IPC workspace built (world={tp}, max_numel=917504, hidden=7168)",
    "mscclpp": "Created MSCCL++ communicator: group=tp world_size={tp} device=cuda:0 allreduce_configs=8 "
    "allgather_configs=0",
}
GAVE_UP = {
    "fusion": "Failed to initialize FlashInfer workspace (backend=trtllm): simulated. "
    "Disabling flashinfer allreduce fusion permanently.",
    "pcie-ipc": "FlashInfer PCIe-IPC workspace (max_numel=917504) failed: simulated; reductions stay on NCCL",
    "mscclpp": "PyMscclpp is unavailable because its dependencies failed to import: No module named 'cupy'",
}


def switched_on(args: ServerArgs, environ: Mapping[str, str]) -> list[str]:
    """The backends this argv and environment ask SGLang for."""
    on = []
    flags = set(args.ignored_args)
    if "--flashinfer-allreduce-fusion-backend" in flags and "--enforce-disable-flashinfer-allreduce-fusion" not in flags:
        on.append("fusion")
    if environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "").lower() in ("1", "true"):
        on.append("pcie-ipc")
    if "--enable-mscclpp" in flags:
        on.append("mscclpp")
    return on


def startup_lines(args: ServerArgs, environ: Mapping[str, str], withhold: set[str]) -> list[str]:
    return [
        "SIMULATED " + (GAVE_UP[name] if name in withhold else UP[name].format(tp=args.tp_size))
        for name in switched_on(args, environ)
    ]
