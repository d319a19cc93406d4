"""Unverified adapters for the non-NCCL all-reduce kernels a profile can switch on.

None of these has been run by the kit's own tests: they need multi-GPU CUDA hosts and libraries
(sgl_kernel, flashinfer with pcie_ipc_comm, mscclpp) that CI does not have. Each is kept small and
mirrors how SGLang 0.5.23 constructs the same object, so a failure here points at the library, not
the harness. Every failure to construct becomes a skipped row with the library's own message;
a size the kernel declines becomes a skipped row too (SGLang would send it to NCCL).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from bench.allreduce.backends import (
    Backend,
    BackendUnavailable,
    RankContext,
    _init_default_group,
    module_missing,
)

if TYPE_CHECKING:
    import torch


class _NcclPlusGloo(Backend):
    """Default NCCL group for the device plus a gloo group for the CPU-side handle exchange."""

    def init(self, ctx: RankContext) -> None:
        import torch.distributed as dist

        _init_default_group(ctx, "nccl")
        self._device = ctx.local_device
        self.cpu_group = dist.new_group(backend="gloo")
        try:
            self._setup(ctx)
        except BackendUnavailable:
            raise
        except Exception as exc:  # the library's own failure is the most useful reason
            raise BackendUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def _setup(self, ctx: RankContext) -> None:
        raise NotImplementedError

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.cpu_group)


class PcieIpc(_NcclPlusGloo):
    """FlashInfer's PCIe-IPC one-shot all-reduce (what SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 uses)."""

    name = "pcie-ipc"

    def probe(self) -> str | None:
        missing = module_missing("flashinfer")
        if missing:
            return missing
        try:
            from flashinfer.comm import PcieIpcAllReduceWorkspace  # noqa: F401
        except Exception as exc:
            return f"flashinfer.comm has no PcieIpcAllReduceWorkspace ({type(exc).__name__}: {exc})"
        return None

    def _setup(self, ctx: RankContext) -> None:
        from flashinfer.comm import PcieIpcAllReduceWorkspace

        max_numel = ctx.max_bytes // ctx.dtype.itemsize
        max_numel += -max_numel % 8  # the kernels address 16-byte packs
        self.ws = PcieIpcAllReduceWorkspace(group=self.cpu_group, max_numel=max_numel, dtype=ctx.dtype)

    def supports(self, tensor: torch.Tensor) -> str | None:
        if not self.ws.supports(tensor):
            return "FlashInfer has no tuned PCIe-IPC launch for this shape (SGLang would use NCCL)"
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.ws.all_reduce(tensor)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.destroy()
        super().teardown()


class SglangCustom(_NcclPlusGloo):
    """SGLang's legacy custom all-reduce (one-/two-stage IPC kernels from sgl_kernel)."""

    name = "custom"

    def probe(self) -> str | None:
        return module_missing("sglang", "sgl_kernel")

    def _setup(self, ctx: RankContext) -> None:
        import torch
        from sglang.srt.distributed.device_communicators.custom_all_reduce import CustomAllreduce

        self.ca = CustomAllreduce(group=self.cpu_group, device=torch.device("cuda", ctx.local_device))
        if self.ca.disabled:
            raise BackendUnavailable(
                "SGLang disabled its custom all-reduce here (it needs NVLink, or exactly 2 PCIe GPUs); "
                "the rank log has its warning"
            )

    def supports(self, tensor: torch.Tensor) -> str | None:
        if not self.ca.should_custom_ar(tensor):
            return "SGLang's should_custom_ar declined this size (the server would use NCCL)"
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        out = self.ca.custom_all_reduce(tensor)
        if out is None:
            raise RuntimeError("custom_all_reduce returned None after should_custom_ar accepted the tensor")
        return out

    def capture(self) -> contextlib.AbstractContextManager[None]:
        return self.ca.capture()

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.ca.close()
        super().teardown()


class Mscclpp(_NcclPlusGloo):
    """MSCCL++ through SGLang's PyMscclppCommunicator (it tunes its algorithms at construction)."""

    name = "mscclpp"

    def probe(self) -> str | None:
        return module_missing("sglang", "mscclpp")

    def _setup(self, ctx: RankContext) -> None:
        import torch
        from sglang.srt.distributed.device_communicators.pymscclpp import PyMscclppCommunicator

        self.comm = PyMscclppCommunicator(
            group=self.cpu_group, device=torch.device("cuda", ctx.local_device), collectives={"allreduce"}
        )
        if not self.comm.available:
            raise BackendUnavailable("SGLang's MSCCL++ communicator disabled itself (see the rank log)")

    def supports(self, tensor: torch.Tensor) -> str | None:
        with self.comm.change_state(enable=True):
            if not self.comm.should_mscclpp_allreduce(tensor):
                return "MSCCL++ has no tuned algorithm for this size (SGLang would use NCCL)"
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(tensor)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.comm.destroy()
        super().teardown()


class SymmMem(_NcclPlusGloo):
    """Torch symmetric-memory one-shot all-reduce, gated as SGLang gates it: SM 9.x/10.x and multicast."""

    name = "symm-mem"

    def probe(self) -> str | None:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device visible"
        major, minor = torch.cuda.get_device_capability(0)
        if major not in (9, 10):
            return f"compute capability {major}.{minor}: SGLang enables torch symm-mem only on 9.x/10.x"
        try:
            import torch.distributed._symmetric_memory  # noqa: F401
        except Exception as exc:
            return f"torch symmetric memory not importable ({type(exc).__name__}: {exc})"
        return None

    def _setup(self, ctx: RankContext) -> None:
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD
        self.group_name = group.group_name
        numel = ctx.max_bytes // ctx.dtype.itemsize
        self.buf = symm_mem.empty(numel, dtype=ctx.dtype, device=torch.device("cuda", ctx.local_device))
        handle = symm_mem.rendezvous(self.buf, self.group_name)
        if handle.multicast_ptr == 0:
            raise BackendUnavailable(
                "no multicast support (needs NVLink/NVSwitch; PCIe has none): SGLang disables symm-mem here"
            )

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch

        staged = self.buf[: tensor.numel()]
        staged.copy_(tensor.view(-1))
        out = torch.ops.symm_mem.one_shot_all_reduce(staged, "sum", self.group_name)
        return out.view(tensor.shape)
