"""Host facts: what the doctor learns about a host, and what host-dependent rules read.

The doctor writes this shape with `launcher doctor --out F` (`--json` prints it); `launcher show/check
--host-facts F` reads the same file. Extra keys in the doctor's JSON are ignored here.
"""

from __future__ import annotations

import json
import shlex
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

    def gaps(self) -> list[str]:
        """What host-dependent rules read and these facts lack, in words ("no GPUs", "no SM", ...): a file the
        doctor wrote on a host without GPUs or nvidia-smi has none of them. Empty: nothing a rule reads is missing."""
        single = len(self.gpus) == 1  # one GPU has no links: no interconnect or P2P to know
        out = [] if self.gpus else ["no GPUs"]
        if not self.sm_versions:
            out.append("no SM (compute capability)")
        if self.interconnect is None and not single:
            out.append("no topology (interconnect)")
        if self.p2p_ok is None and not single:
            out.append("no P2P status")
        return out


def recipe(path: str | Path = "host-facts.json") -> str:
    """The one command every hint gives for a host-facts file: the doctor writes it atomically and says where."""
    return f"launcher doctor --out {shlex.quote(str(path))}"


def load_host_facts(path: str | Path) -> HostFacts:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{p}: host-facts file not found; create it on the GPU host with `{recipe(p)}`") from exc
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg}); regenerate it with `{recipe(p)}`") from exc
    return validated(HostFacts, raw, p, {}, f"regenerate it with `{recipe(p)}`")
