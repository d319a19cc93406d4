"""The backends `--backends` can name: verified ones from `backends.py`, the rest from `experimental.py`.

Kept apart from both so that neither imports the other back; only this module knows every name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from bench.allreduce import experimental
from bench.allreduce.backends import Backend, Gloo, Nccl, NcclDirect

_FACTORIES: dict[str, Callable[[], Backend]] = {
    "nccl": Nccl,
    "nccl-direct": NcclDirect,
    "pcie-ipc": experimental.PcieIpc,
    "fused-ar": experimental.FusedAr,
    "custom": experimental.SglangCustom,
    "mscclpp": experimental.Mscclpp,
    "symm-mem": experimental.SymmMem,
    "gloo": Gloo,
}

KNOWN_BACKENDS: tuple[str, ...] = tuple(_FACTORIES)
"""Names accepted by --backends, in the order they are run and listed."""


def make_backend(name: str) -> Backend:
    return _FACTORIES[name]()


def iter_backends(names: list[str]) -> Iterator[Backend]:
    for name in names:
        yield make_backend(name)
