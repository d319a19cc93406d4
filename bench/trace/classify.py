"""Name -> (communication or compute, family, collective op) for GPU kernels in a torch-profiler trace.

Rules are tried in order; the first match wins; anything unmatched is compute. Families:
nccl, pcie-ipc (FlashInfer PCIe IPC), fused-ar (TensorRT-LLM/FlashInfer all-reduce + norm fusion),
custom-ar (SGLang/vLLM one-/two-stage IPC kernels), symm-mem (torch symmetric memory), mscclpp,
deepep (dispatch/combine all-to-all), other-ar (any other kernel named like an all-reduce).

Beside all-reduces, the collectives a verify step runs are told apart by their op: NCCL's
`ncclDevKernel_Broadcast_*` (SGLang 0.5.23's three sampling broadcasts when a verify is not all greedy,
speculative/eagle_utils.py:803-805, through pynccl or torch.distributed) and `ncclDevKernel_AllGather_*`
(the logits gather, layers/logits_processor.py:1024-1036); SGLang's symmetric-memory Triton all-gather
(`_all_gather_kernel_inner`, distributed/device_communicators/triton_symm_mem_ag.py:250) and torch symmetric
memory / MSCCL++ kernels take their op from their name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class KernelClass:
    category: str  # "comm" | "compute"
    family: str  # see module docstring; "compute" for compute kernels
    op: str  # "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv",
    # "dispatch", "combine", "all_to_all", "collective" (unknown), "" for compute

    @property
    def is_comm(self) -> bool:
        return self.category == "comm"

    @property
    def is_allreduce(self) -> bool:
        return self.op == "all_reduce"

    @property
    def is_broadcast(self) -> bool:
        return self.op == "broadcast"

    @property
    def is_allgather(self) -> bool:
        return self.op == "all_gather"


COMPUTE = KernelClass("compute", "compute", "")

_NCCL_OPS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("reduce", "reduce"),
)


def _nccl_op(name: str) -> str:
    # ncclDevKernel_AllReduce_Sum_bf16_RING_LL / ncclKernel_AllGather_RING_LL_Sum_int8_t / ..._Generic_1
    low = name.lower().replace("_", "")
    tail = low.split("nccldevkernel", 1)[-1] if "nccldevkernel" in low else low.split("ncclkernel", 1)[-1]
    for key, op in _NCCL_OPS:
        if tail.startswith(key):
            return op
    return "collective"


_FUSED_AR = (r"allreduce_?fusion|all_reduce_fus|ar_fusion|trtllm\w*all_?reduce|moe_finalize_all_reduce|"
             r"all_reduce_push_res|lamport\w*all_?reduce|all_?reduce\w*lamport")
_CUSTOM_AR = (r"cross_device_reduce|all_reduce_[12]shot|(?:one|two)_?shot\w*all_?reduce|(?:one|two)shotallreduce|"
              r"custom_?all_?reduce|quick_?all_?reduce|allreduce_[12]stage")
_RULES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), family, op)
    for pattern, family, op in (
        (r"pcie_?ipc", "pcie-ipc", "all_reduce"),
        (r"deep_?ep\w*::\w*::dispatch|deep_?ep.*\bdispatch", "deepep", "dispatch"),
        (r"deep_?ep\w*::\w*::combine|deep_?ep.*\bcombine", "deepep", "combine"),
        (r"deep_?ep::", "deepep", "all_to_all"),
        (_FUSED_AR, "fused-ar", "all_reduce"),
        (r"mscclpp", "mscclpp", "all_reduce?"),
        (r"\ballreduce(?:allpairs|packet|nvls\w*|rsag\w*|\d+)\b", "mscclpp", "all_reduce"),
        (r"\ballgather(?:allpairs|packet|\d+)\b", "mscclpp", "all_gather"),
        (r"_all_gather_kernel_inner|multimem\w*all_?gather", "symm-mem", "all_gather"),
        (r"symmetric_memory", "symm-mem", "all_reduce?"),
        (r"multimem\w*all_?reduce", "symm-mem", "all_reduce"),
        (_CUSTOM_AR, "custom-ar", "all_reduce"),
        (r"\bnccl(?:dev)?kernel|^\s*(?:void\s+)?nccl", "nccl", "nccl"),
        (r"all_?reduce", "other-ar", "all_reduce"),
    )
)


def _op_by_name(name: str) -> str:
    for pattern, op in ((r"all_?reduce", "all_reduce"), (r"all_?gather", "all_gather"),
                        (r"broadcast", "broadcast"), (r"reduce_?scatter", "reduce_scatter")):
        if re.search(pattern, name, re.IGNORECASE):
            return op
    return "collective"


@lru_cache(maxsize=4096)
def classify_kernel(name: str) -> KernelClass:
    """Classify one GPU kernel by its (demangled) name."""
    for pattern, family, op in _RULES:
        if pattern.search(name):
            if op == "nccl":
                op = _nccl_op(name)
            elif op == "all_reduce?":
                op = _op_by_name(name)
            return KernelClass("comm", family, op)
    return COMPUTE


def classify_copy(name: str) -> KernelClass:
    """gpu_memcpy / gpu_memset events: a peer-to-peer copy moves data between GPUs, the rest is local."""
    if re.search(r"PtoP|peer", name, re.IGNORECASE):
        return KernelClass("comm", "p2p-copy", "send_recv")
    return KernelClass("compute", "copy", "")


HOST_ALLREDUCE_OPS = ("c10d::allreduce_", "c10d::allreduce_coalesced_")
"""torch.distributed's dispatcher ops for an all-reduce, one per call on the calling thread."""
HOST_ALLREDUCE_ANNOTATIONS = re.compile(r"^(?:nccl|gloo|ucc|mpi):all_reduce", re.IGNORECASE)
"""ProcessGroup record_function ranges; used only when the c10d ops are absent (no double count)."""
HOST_BROADCAST_OPS = ("c10d::broadcast_",)
"""torch.distributed.broadcast; pynccl's broadcast (SGLang's tp_group.broadcast when pynccl is up) has none."""
HOST_ALLGATHER_OPS = ("c10d::_allgather_base_", "c10d::allgather_", "c10d::allgather_into_tensor_coalesced_")
"""torch.distributed's all-gather ops (all_gather_into_tensor, all_gather)."""
