"""A pure-torch stand-in for the CPU build of `sgl_kernel`, for the real-server test tier only.

SGLang 0.5.23 with `--device cpu` imports two ops from `sgl_kernel` at import time, with no fallback;
the CPU build of sgl-kernel is not on PyPI (it is compiled from source for AVX-512/AMX Xeons). This
package provides those two, written from what SGLang's own Triton kernels of the same name do on GPU.
Six speculative-decoding ops are imported at import time too, by modules every server loads, but only
called by speculation (which the tier does not run on the CPU): they exist as names that raise
NotImplementedError when called. Any other name raises NotImplementedError naming the op on access, so
a path the tier does not cover fails loudly instead of running something made up. It is put on PYTHONPATH by testsupport/real/realstack.py
only; never install it.
"""

from __future__ import annotations

import ctypes

import torch

__version__ = "0.0.0+kit-test-standin"

PROVIDED = ("assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu")

# Imported at import time by SGLang 0.5.23 on the CPU (sglang/kernels/ops/speculative/...), called only by
# speculative decoding: name -> the import line.
IMPORTED_ONLY = {
    "build_tree_kernel_efficient_cpu": "kernels/ops/speculative/spec_tree.py:40",
    "verify_tree_greedy_cpu": "kernels/ops/speculative/spec_tree.py:43",
    "assign_draft_cache_locs_contiguous_cpu": "kernels/ops/speculative/cache_locs.py:28",
    "assign_extend_cache_locs_cpu": "kernels/ops/speculative/cache_locs.py:28",
    "fill_accept_out_cache_loc_cpu": "kernels/ops/speculative/eagle.py:10",
    "fill_bonus_tokens_cpu": "kernels/ops/speculative/eagle.py:10",
}


def _missing(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"sgl_kernel.{name} is not provided by the kit's test stand-in (it implements only "
        f"{', '.join(PROVIDED)}); the CPU build of sgl-kernel has it"
    )


def _imported_only(name: str):
    def op(*_args, **_kwargs):
        raise _missing(name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Imported at sglang/{IMPORTED_ONLY[name]}; raises NotImplementedError when called."
    return op


globals().update({name: _imported_only(name) for name in IMPORTED_ONLY})


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token table.

    Imported at sglang/srt/mem_cache/allocation.py:46 (`from sgl_kernel import assign_req_to_token_pool_cpu`)
    and called from there (:746) on every prefill and decode. The Triton twin `assign_req_to_token_pool`
    (allocation.py:692) defines the effect: request i gets `end_offset[i] - start_offset[i]` slots, taken in
    order from `out_cache_loc` after those of requests 0..i-1, stored at columns start..end of row
    `req_pool_indices[i]`."""
    if req_to_token.shape[1] != pool_len:
        raise ValueError(f"pool_len {pool_len} != req_to_token row length {req_to_token.shape[1]}")
    starts, ends, rows = start_offset.tolist(), end_offset.tolist(), req_pool_indices.tolist()
    taken = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        n = end - start
        if n <= 0:
            continue
        req_to_token[row, start:end] = out_cache_loc[taken:taken + n].to(req_to_token.dtype)
        taken += n


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Copy KV rows `src_loc` onto rows `tgt_loc` in every layer buffer.

    Imported at sglang/srt/kernels/ops/kvcache/cache_move.py:10 and called at :191 with the first
    `num_locs` locations. `data_ptrs[b]` is the address of buffer b, `strides[b]` its row size in bytes
    (the Triton twin `copy_all_layer_kv_cache_tiled` in the same file). All source rows are read before any
    target row is written, as the Triton kernel's load-then-store does, so overlapping moves are safe."""
    src, tgt = src_loc.tolist(), tgt_loc.tolist()
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} source rows but {len(tgt)} target rows")
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, row in zip(tgt, rows, strict=True):
            ctypes.memmove(base + t * stride, row, stride)


def __getattr__(name: str):
    if name.startswith("__"):  # import machinery and introspection probe dunders; those stay AttributeError
        raise AttributeError(name)
    raise _missing(name)
