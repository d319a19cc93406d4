"""Adapters for the non-NCCL all-reduce kernels a profile can switch on.

CI cannot run them: they need multi-GPU CUDA hosts and libraries (sgl_kernel, flashinfer with
pcie_ipc_comm, mscclpp). Which of them has run on real GPUs, with what result, is recorded under
docs/evidence/ (see docs/diagnose.md). Each is kept small and mirrors how SGLang 0.5.23 constructs
the same object, so a failure here points at the library, not the harness. Every failure to
construct becomes a skipped row with the library's own message (for SGLang's communicators, the
warning it logged when it disabled itself); a size the kernel declines becomes a skipped row too
(SGLang would send it to NCCL).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from bench.allreduce.backends import (
    Backend,
    BackendUnavailable,
    RankContext,
    _init_default_group,
    module_missing,
)

if TYPE_CHECKING:
    import torch


@contextlib.contextmanager
def logged_warnings(logger_name: str) -> Iterator[list[str]]:
    """Collect what a library logs at WARNING or above while constructing its communicator.

    SGLang's communicators do not raise when they turn themselves off: they log why and set a flag.
    That message is the reason a skipped row should show, not a generic "disabled itself".
    """
    said: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    handler = _Keep(level=logging.WARNING)
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


def _version(dist_name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist_name)
    except PackageNotFoundError:
        return "unknown (no package metadata)"


def flashinfer_comm_missing(*names: str) -> str | None:
    """Why FlashInfer's comm module cannot give these names here, or None (checked in the parent)."""
    missing = module_missing("flashinfer")
    if missing:
        return missing
    try:
        import flashinfer.comm as comm
    except Exception as exc:
        return f"flashinfer.comm does not import ({type(exc).__name__}: {exc})"
    absent = [n for n in names if not hasattr(comm, n)]
    return f"flashinfer.comm has no {', '.join(absent)}" if absent else None


def disabled_reason(what: str, said: list[str]) -> str:
    """The skipped-row reason for a communicator that turned itself off, in the library's words."""
    if said:
        return f"{what} disabled itself: " + " | ".join(" ".join(m.split()) for m in said)
    return f"{what} disabled itself without logging why (see the rank log)"


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
    path = ("device", "pcie-ipc")

    def probe(self) -> str | None:
        return flashinfer_comm_missing("PcieIpcAllReduceWorkspace")

    def _setup(self, ctx: RankContext) -> None:
        import torch.distributed as dist
        from flashinfer.comm import PcieIpcAllReduceWorkspace

        max_numel = ctx.max_bytes // ctx.dtype.itemsize
        max_numel += -max_numel % 8  # the kernels address 16-byte packs
        # As SGLang's PcieIpcCommunicator: the device group builds the workspace, the CPU group tunes.
        self.ws = PcieIpcAllReduceWorkspace(
            group=dist.group.WORLD,
            max_numel=max_numel,
            dtype=ctx.dtype,
            tune_batches=tune_batches(max_numel // ctx.hidden),
        )
        self.tuned = self._tune(ctx)
        self._bound_stream = None  # the stream the workspace serves (see allreduce)

    def _tune(self, ctx: RankContext) -> str:
        """Measure launch tactics for the verify shapes, as the server does at start-up.

        Without it the kernels run FlashInfer's seed policy, which is what a server started with
        --disable-flashinfer-autotune runs; the outcome is logged so a row says which it measured.
        """
        log = logging.getLogger("bench.allreduce")
        if ctx.max_bytes // ctx.dtype.itemsize < ctx.hidden:
            log.warning("pcie-ipc: sizes are smaller than one row of hidden=%d; seed policy", ctx.hidden)
            return "seed policy (no full row to tune)"
        try:
            tuned = self.ws.tune([ctx.hidden], dtype=ctx.dtype, tune_group=self.cpu_group)
        except Exception as exc:  # SGLang keeps the seed policy when tuning fails; so does the bench
            log.warning("pcie-ipc: FlashInfer autotune failed (%s: %s); seed policy", type(exc).__name__, exc)
            return f"seed policy (autotune failed: {type(exc).__name__})"
        log.warning("pcie-ipc: FlashInfer autotuned %d shape(s) for hidden=%d", len(tuned or ()), ctx.hidden)
        return f"autotuned {len(tuned or ())} shape(s)"

    def describe(self) -> dict[str, str]:
        return {"flashinfer": _version("flashinfer-python"), "pcie_ipc_launch": self.tuned}

    def supports(self, tensor: torch.Tensor) -> str | None:
        if not self.ws.supports(tensor):
            return "FlashInfer has no tuned PCIe-IPC launch for this shape (SGLang would use NCCL)"
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch

        # As SGLang's pcie_ipc_all_reduce: one workspace serves one stream, and the binding moves
        # with the caller at phase boundaries (warm-up, capture, replay), which never overlap here:
        # the harness synchronises between them.
        stream = torch.cuda.current_stream()
        if stream_changed(stream, self._bound_stream):
            self.ws.rebind_stream()
            self._bound_stream = stream
        return self.ws.all_reduce(tensor)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.destroy()
        super().teardown()


def stream_changed(current: Any, bound: Any) -> bool:
    """Whether a call comes from another stream than the bound one (or none is bound yet).

    None is tested first: torch's Stream answers False to both `== None` and `!= None`
    (THPStream_richcompare), so `current != None` would never rebind the first time."""
    return bound is None or current != bound


def tune_batches(max_rows: int) -> tuple[int, ...]:
    """Row counts to tune, as SGLang 0.5.23 picks them: powers of two up to 512 that fit, then max_rows."""
    rows = [r for r in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if r <= max_rows]
    if max_rows >= 1 and max_rows not in rows:
        rows.append(max_rows)
    return tuple(rows)


class FusedAr(_NcclPlusGloo):
    """FlashInfer's TRT-LLM all-reduce fusion kernel, pattern kAllReduce, as SGLang's flashinfer_allreduce.

    The `fused` profile runs the same kernel with the residual-add and RMSNorm fused in
    (kARResidualRMSNorm); kAllReduce is the same launch with the norm epilogue off, so its time is
    the communication part of that kernel and its sums can be checked exactly.
    """

    name = "fused-ar"
    path = ("device", "fused-ar")

    def probe(self) -> str | None:
        return flashinfer_comm_missing("allreduce_fusion", "create_allreduce_fusion_workspace")

    def _setup(self, ctx: RankContext) -> None:
        import inspect

        import torch.distributed as dist
        from flashinfer import comm

        self.comm = comm
        max_tokens = -(-ctx.max_bytes // (ctx.hidden * ctx.dtype.itemsize))
        # backend="trtllm" as SGLang resolves it on a single node; never "mnnvl" (multicast).
        self.ws = comm.create_allreduce_fusion_workspace(
            backend="trtllm",
            world_size=ctx.world,
            rank=ctx.rank,
            max_token_num=max_tokens,
            hidden_dim=ctx.hidden,
            dtype=ctx.dtype,
            gpus_per_node=ctx.world,
            group=dist.group.WORLD,
        )
        self.world = ctx.world
        self.hidden = ctx.hidden
        self.max_elems = max_tokens * ctx.hidden
        self.extra = (
            {"trigger_completion_at_end": False}
            if "trigger_completion_at_end" in inspect.signature(comm.allreduce_fusion).parameters
            else {}
        )

    def describe(self) -> dict[str, str]:
        return {
            "flashinfer": _version("flashinfer-python"),
            "fusion": f"backend={getattr(self.ws, 'backend', '?')}, pattern=kAllReduce, fp32_acc, pdl",
        }

    def supports(self, tensor: torch.Tensor) -> str | None:
        # SGLang's can_use_flashinfer_allreduce, for the trtllm backend.
        if tensor.ndim != 2 or not tensor.is_contiguous():
            return "not a contiguous (tokens, hidden) tensor (SGLang would use NCCL)"
        tokens, hidden = tensor.shape
        if hidden != self.hidden:
            # The server calls it with (tokens, model hidden) only. Other widths are not a shape it
            # sees; and a row wider than 65536 bf16 elements (8 per thread, clusters of at most 8
            # blocks of 1024 threads) makes the launcher refuse ("block_size > 1024").
            return f"not a (tokens, {self.hidden}) message: the server sends only those to this kernel"
        if tokens * hidden > self.max_elems or not self.ws.is_buffer_size_sufficient(
            self.world, tokens, hidden, tensor.dtype
        ):
            return "larger than the fusion workspace (SGLang would use NCCL)"
        return None

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch

        out = torch.empty_like(tensor)
        self.comm.allreduce_fusion(
            input=tensor,
            workspace=self.ws,
            pattern=self.comm.AllReduceFusionPattern.kAllReduce,
            launch_with_pdl=True,
            output=out,
            fp32_acc=True,
            **self.extra,
        )
        return out

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.destroy()
        super().teardown()


class SglangCustom(_NcclPlusGloo):
    """SGLang's legacy custom all-reduce (one-/two-stage IPC kernels from sgl_kernel)."""

    name = "custom"
    path = ("device", "custom-ar")

    def probe(self) -> str | None:
        return module_missing("sglang", "sgl_kernel")

    def _setup(self, ctx: RankContext) -> None:
        import torch
        from sglang.srt.distributed.device_communicators.custom_all_reduce import CustomAllreduce

        with logged_warnings("sglang") as said:
            self.ca = CustomAllreduce(group=self.cpu_group, device=torch.device("cuda", ctx.local_device))
        if self.ca.disabled:
            raise BackendUnavailable(disabled_reason("SGLang's custom all-reduce", said))

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
    path = ("device", "mscclpp")

    def probe(self) -> str | None:
        return module_missing("sglang", "mscclpp")

    def _setup(self, ctx: RankContext) -> None:
        import torch
        from sglang.srt.distributed.device_communicators.pymscclpp import PyMscclppCommunicator

        # SGLang 0.5.23 enables it only at world sizes 4, 8, 16, 32 and 64: at 2 it logs why and stays off.
        with logged_warnings("sglang") as said:
            self.comm = PyMscclppCommunicator(
                group=self.cpu_group, device=torch.device("cuda", ctx.local_device), collectives={"allreduce"}
            )
        if not self.comm.available:
            raise BackendUnavailable(disabled_reason("SGLang's MSCCL++ communicator", said))

    def describe(self) -> dict[str, str]:
        return {"mscclpp": _version("mscclpp"), "sglang": _version("sglang")}

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
    path = ("device", "symm-mem")

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
