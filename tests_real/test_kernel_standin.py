"""The sgl_kernel stand-in: its two ops do what SGLang's Triton twins do, and every other name fails loudly."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from testsupport.real.realstack import KERNEL_STANDIN


@pytest.fixture(scope="module")
def sgl_kernel():
    sys.path.insert(0, str(KERNEL_STANDIN))
    try:
        yield importlib.import_module("sgl_kernel")
    finally:
        sys.path.remove(str(KERNEL_STANDIN))
        sys.modules.pop("sgl_kernel", None)


def test_assign_req_to_token_pool_writes_each_requests_slots_in_order(sgl_kernel):
    table = torch.full((4, 8), -1, dtype=torch.int32)
    # request in row 2 gets columns 1..3, the one in row 0 columns 5..6, the one in row 3 nothing
    sgl_kernel.assign_req_to_token_pool_cpu(
        torch.tensor([2, 0, 3]), table, torch.tensor([1, 5, 4]), torch.tensor([4, 7, 4]),
        torch.tensor([10, 11, 12, 13, 14], dtype=torch.int64), 8)
    assert table[2].tolist() == [-1, 10, 11, 12, -1, -1, -1, -1]
    assert table[0].tolist() == [-1, -1, -1, -1, -1, 13, 14, -1]
    assert table[3].tolist() == [-1] * 8 and table[1].tolist() == [-1] * 8
    with pytest.raises(ValueError, match="pool_len"):
        sgl_kernel.assign_req_to_token_pool_cpu(torch.tensor([0]), table, torch.tensor([0]), torch.tensor([1]),
                                                torch.tensor([1]), 9)


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer_reading_before_writing(sgl_kernel):
    k = torch.arange(6 * 4, dtype=torch.bfloat16).reshape(6, 4)
    v = torch.arange(100, 100 + 6 * 2, dtype=torch.float32).reshape(6, 2)
    k0, v0 = k.clone(), v.clone()
    ptrs = torch.tensor([k.data_ptr(), v.data_ptr()], dtype=torch.uint64)
    strides = torch.tensor([k.stride(0) * k.element_size(), v.stride(0) * v.element_size()], dtype=torch.int64)
    # rows 1 -> 2 and 2 -> 3 overlap: row 3 must get the old row 2
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([2, 3]), torch.tensor([1, 2]))
    for now, old in ((k, k0), (v, v0)):
        assert torch.equal(now[2], old[1]) and torch.equal(now[3], old[2])
        assert torch.equal(now[[0, 1, 4, 5]], old[[0, 1, 4, 5]])


def test_imported_only_ops_exist_but_raise_when_called(sgl_kernel):
    for name, where in sgl_kernel.IMPORTED_ONLY.items():
        op = getattr(sgl_kernel, name)
        assert where in op.__doc__
        with pytest.raises(NotImplementedError, match=name):
            op(None)


def test_any_other_op_raises_on_access_naming_it(sgl_kernel):
    with pytest.raises(NotImplementedError, match="sgl_kernel.decode_attention_cpu"):
        sgl_kernel.decode_attention_cpu  # noqa: B018
    with pytest.raises(ImportError):  # `from sgl_kernel.x import y` of a submodule: not there either
        importlib.import_module("sgl_kernel.speculative")
    assert not hasattr(sgl_kernel, "__wrapped__")  # introspection still gets AttributeError
