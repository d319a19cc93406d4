"""Physical lower bound for an all-reduce, drawn under the measured curves.

floor_us(S) = 2(n-1)/n * S / B + t_flag

- 2(n-1)/n * S: bytes each GPU's link must carry in a bandwidth-optimal all-reduce (the same factor
  that turns algbw into busbw);
- B: one direction of the link: PCIe Gen5 x16 = 32 GT/s x 16 x 128/130 = 63 GB/s; NVLink4 on
  H100/H200 = 900 GB/s bidirectional = 450 GB/s per direction;
- t_flag: one flag round-trip between GPUs, ~0.5 us (PCIe P2P write latency measured at 0.36-0.45 us).
No real all-reduce reaches it: a one-shot kernel moves (n-1)*S through each link, and NCCL adds
~6.6 us base latency plus ~1 us per hop over PCIe. It says how far from physics a measurement is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    name: str
    gbytes_per_s: float  # one direction
    flag_rtt_us: float


PCIE_GEN5 = Link("PCIe Gen5 x16", 63.0, 0.5)
NVLINK4 = Link("NVLink4 (H100/H200)", 450.0, 0.5)


def link_for(interconnect: str | None) -> Link | None:
    """Link assumed for a host-facts interconnect value; None when unknown."""
    if interconnect is None:
        return None
    return NVLINK4 if interconnect == "nvlink" else PCIE_GEN5


def floor_us(size_bytes: int, nranks: int, link: Link) -> float:
    bus_bytes = 2.0 * (nranks - 1) / nranks * size_bytes
    return bus_bytes / (link.gbytes_per_s * 1e9) * 1e6 + link.flag_rtt_us
