"""The adapters for SGLang's and FlashInfer's kernels: what can be shown without a GPU.

Their CUDA paths run only on GPU hosts (docs/evidence/); here: that a communicator SGLang turns off
is reported in SGLang's own words, and that the adapters size and gate as SGLang 0.5.23 does.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import sys
import types

import pytest

from bench.allreduce import experimental
from bench.allreduce.registry import KNOWN_BACKENDS, make_backend
from testsupport.net import free_port


@pytest.fixture()
def gloo_world_of_one():
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_sglang_mscclpp_refusal_is_reported_in_sglangs_words(gloo_world_of_one):
    """The real PyMscclppCommunicator, without the mscclpp package: it logs why and stays off."""
    import torch
    from sglang.srt.distributed.device_communicators.pymscclpp import PyMscclppCommunicator

    with experimental.logged_warnings("sglang") as said:
        comm = PyMscclppCommunicator(group=gloo_world_of_one, device=torch.device("cpu"), collectives={"allreduce"})
    assert comm.available is False
    reason = experimental.disabled_reason("SGLang's MSCCL++ communicator", said)
    assert reason.startswith("SGLang's MSCCL++ communicator disabled itself: ")
    assert "No module named 'mscclpp'" in reason


def test_logged_warnings_keeps_only_warnings_and_detaches():
    log = logging.getLogger("sglang.srt.some.module")
    with experimental.logged_warnings("sglang") as said:
        log.info("not kept")
        log.warning("world size %d\n  is not supported", 2)
    log.warning("after the block")
    assert said == ["world size 2\n  is not supported"]
    assert experimental.disabled_reason("X", said) == "X disabled itself: world size 2 is not supported"
    assert "without logging why" in experimental.disabled_reason("X", [])


def test_pcie_ipc_tune_batches_match_sglangs():
    from sglang.srt.distributed.device_communicators.pcie_ipc_ar import _tune_batches

    for rows in (0, 1, 3, 7, 8, 24, 511, 512, 513, 1000):
        assert experimental.tune_batches(rows) == _tune_batches(rows)


def _flashinfer(monkeypatch, comm_names: tuple[str, ...] | None) -> None:
    """Make `flashinfer` absent (None), or present with a `flashinfer.comm` offering `comm_names`,
    whatever this host has installed."""
    if comm_names is None:
        monkeypatch.setitem(sys.modules, "flashinfer", None)  # find_spec -> None, import -> ImportError
        return
    root = types.ModuleType("flashinfer")
    root.__spec__ = importlib.machinery.ModuleSpec("flashinfer", None, is_package=True)
    comm = types.ModuleType("flashinfer.comm")
    for name in comm_names:
        setattr(comm, name, object())
    root.comm = comm
    monkeypatch.setitem(sys.modules, "flashinfer", root)
    monkeypatch.setitem(sys.modules, "flashinfer.comm", comm)


def test_fused_ar_is_a_known_backend_that_names_a_missing_flashinfer(monkeypatch):
    assert "fused-ar" in KNOWN_BACKENDS
    _flashinfer(monkeypatch, None)
    assert make_backend("fused-ar").probe() == "python package 'flashinfer' is not installed"
    assert make_backend("pcie-ipc").probe() == "python package 'flashinfer' is not installed"
    _flashinfer(monkeypatch, ("PcieIpcAllReduceWorkspace",))  # a FlashInfer without the fusion kernels
    assert make_backend("fused-ar").probe() == (
        "flashinfer.comm has no allreduce_fusion, create_allreduce_fusion_workspace"
    )
    assert make_backend("pcie-ipc").probe() is None
    _flashinfer(monkeypatch, ("allreduce_fusion", "create_allreduce_fusion_workspace"))
    assert make_backend("fused-ar").probe() is None
    assert make_backend("pcie-ipc").probe() == "flashinfer.comm has no PcieIpcAllReduceWorkspace"


def test_pcie_ipc_rebinds_on_the_first_call_and_on_every_stream_change():
    """torch's Stream says False to `!= None`: the first call on a new stream must still rebind
    (seen on 2 H200s: "this workspace is already bound to ..." in CUDA-graph mode)."""
    import torch

    a = torch.Stream("cpu")
    assert (a != None) is False  # noqa: E711 - the trap itself
    assert experimental.stream_changed(a, None) is True
    assert experimental.stream_changed(a, a) is False

    class Side:  # a second stream, compared by id as torch does
        def __eq__(self, other):
            return isinstance(other, Side)

    assert experimental.stream_changed(Side(), a) is True
