"""Host facts: what the doctor learns about a host, and what host-dependent rules read.

The doctor writes this shape with `launcher doctor --json`; `launcher show/check --host-facts F`
reads the same file. Extra keys in the doctor's JSON are ignored here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from launcher.errors import UserError, validated

Interconnect = Literal["nvlink", "pcie-switch", "pcie-hostbridge", "pcie-cross-socket"]


class GpuFact(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index: int
    name: str = ""
    compute_cap: str = ""  # "12.0", "9.0"
    driver_version: str = ""
    bus_id: str = ""


class HostFacts(BaseModel):
    model_config = ConfigDict(extra="ignore")
    gpus: list[GpuFact] = []
    interconnect: Interconnect | None = None
    numa_nodes: list[list[int]] = []  # GPU indices per NUMA node
    p2p_ok: bool | None = None
    p2p_bad_pairs: list[tuple[int, int]] = []  # GPU index pairs whose P2P status is not OK
    nvlink_multicast: bool | None = None
    nccl_version: str | None = None
    # NICs in `nvidia-smi topo -m` (its NIC legend: RDMA devices such as mlx5_0); None: not read
    rdma_nics: list[str] | None = None

    @property
    def sm_versions(self) -> set[str]:
        return {g.compute_cap for g in self.gpus if g.compute_cap}

    @property
    def is_pcie(self) -> bool | None:
        if self.interconnect is None:
            return None
        return self.interconnect != "nvlink"


def load_host_facts(path: str | Path) -> HostFacts:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{p}: host-facts file not found; create it with `launcher doctor --json > {p}`") from exc
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg}); regenerate it with `launcher doctor --json`") from exc
    return validated(HostFacts, raw, p, {}, "regenerate it with `launcher doctor --json`")
