"""All-reduce backends: each supplies only probe / init / allreduce / teardown; the harness does the rest.

`gloo` (CPU) and `nccl` (CUDA, through torch.distributed) are the verified backends; `nccl-direct` calls
NCCL without torch.distributed around each call (cupy's binding), to tell NCCL's own time from torch's. The adapters for
SGLang's and FlashInfer's own kernels live in `experimental.py`: they are thin, unverified wrappers
that report themselves as skipped wherever their library or hardware is missing. `registry.py` names
them all; this module imports neither of the other two.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported lazily so that `--help` and input checks stay fast
    import torch


class BackendUnavailable(Exception):
    """The backend cannot run here (library, hardware or topology missing); reported as a skipped row."""


@dataclass(frozen=True)
class RankContext:
    """What a rank knows when it initialises a backend."""

    rank: int
    world: int
    init_method: str
    timeout_s: float
    hidden: int
    max_bytes: int
    dtype: Any  # torch.dtype

    @property
    def local_device(self) -> int:
        return self.rank  # one local rank per visible GPU


def module_missing(*names: str) -> str | None:
    """Reason string if any top-level module is not installed (checked without importing it)."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            return f"python package '{name}' is not installed"
    return None


class Backend:
    """Base: subclasses override what differs. `device_type` is 'cpu' or 'cuda'."""

    name = "base"
    device_type = "cuda"
    verified = False  # True only for backends whose CUDA path was run by the kit's own tests
    # What proves the backend's own path ran (exact.py, the exact check's negative control): ("device",
    # the kernel family bench/trace/classify.py gives its kernels) or ("host", a profiler range prefix).
    path: tuple[str, str] | None = None

    def probe(self) -> str | None:
        """Cheap check in the parent process, before any rank starts; a reason means 'skipped'."""
        return None

    def init(self, ctx: RankContext) -> None:
        raise NotImplementedError

    def supports(self, tensor: torch.Tensor) -> str | None:
        """Reason this message is declined (the server would fall back to NCCL for it), else None."""
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` across ranks; returns the tensor holding the result (may be a new one)."""
        raise NotImplementedError

    def describe(self) -> dict[str, str]:
        """Facts about what ran (library version, tuning), copied into every row of this backend."""
        return {}

    def capture(self) -> contextlib.AbstractContextManager[None]:
        """Context entered around CUDA-graph capture (some backends register buffers on exit)."""
        return contextlib.nullcontext()

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def teardown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _init_default_group(ctx: RankContext, backend: str) -> None:
    import torch
    import torch.distributed as dist

    device_id = None  # NCCL binds its communicator to the rank's GPU at init
    if backend == "nccl":
        torch.cuda.set_device(ctx.local_device)
        device_id = torch.device("cuda", ctx.local_device)
    dist.init_process_group(
        backend,
        init_method=ctx.init_method,
        rank=ctx.rank,
        world_size=ctx.world,
        timeout=timedelta(seconds=max(ctx.timeout_s, 1.0)),
        device_id=device_id,
    )


class Gloo(Backend):
    """CPU all-reduce through torch.distributed's gloo: lets CI test the whole harness without a GPU."""

    name = "gloo"
    device_type = "cpu"
    verified = True
    path = ("host", "gloo:all_reduce")  # ProcessGroupGloo's profiler range for the call

    def probe(self) -> str | None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_gloo_available()):
            return "this torch build has no gloo backend"
        return None

    def init(self, ctx: RankContext) -> None:
        _init_default_group(ctx, "gloo")

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor


class Nccl(Backend):
    """NCCL through torch.distributed, under whatever NCCL_* environment the profile sets."""

    name = "nccl"
    verified = True
    path = ("device", "nccl")

    def probe(self) -> str | None:
        import torch
        import torch.distributed as dist

        if torch.version.cuda is None:
            return "this torch build has no CUDA (CPU-only)"
        if not (dist.is_available() and dist.is_nccl_available()):
            return "this torch build has no NCCL backend"
        return None

    def init(self, ctx: RankContext) -> None:
        _init_default_group(ctx, "nccl")
        self._device = ctx.local_device

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(device_ids=[self._device])


class NcclDirect(Nccl):
    """NCCL called directly on the current CUDA stream through cupy's binding, with no torch.distributed
    bookkeeping around each call: the way nccl-tests calls it, and the way SGLang's PyNcclCommunicator
    calls it inside CUDA graphs. torch.distributed (gloo) only exchanges the unique id and barriers."""

    name = "nccl-direct"
    verified = False

    def probe(self) -> str | None:
        return module_missing("cupy") or super().probe()

    def init(self, ctx: RankContext) -> None:
        import torch
        import torch.distributed as dist
        from cupy.cuda import nccl

        _init_default_group(ctx, "gloo")
        torch.cuda.set_device(ctx.local_device)
        box = [nccl.get_unique_id() if ctx.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        self._nccl = nccl
        self._comm = nccl.NcclCommunicator(ctx.world, box[0], ctx.rank)
        # ncclDataType_t: ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9 (nccl.h)
        self._types = {torch.float16: 6, torch.float32: 7, torch.bfloat16: 9}

    def supports(self, tensor: torch.Tensor) -> str | None:
        return None if tensor.dtype in self._types else f"dtype {tensor.dtype} has no NCCL type here"

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        self._comm.allReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), self._types[tensor.dtype],
                             self._nccl.NCCL_SUM, stream)
        return tensor

    def barrier(self) -> None:
        import torch
        import torch.distributed as dist

        torch.cuda.synchronize()
        dist.barrier()

    def teardown(self) -> None:
        self._comm.destroy()
        super().teardown()
