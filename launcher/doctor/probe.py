"""Everything the doctor reads from the host, behind one object so tests can replace any part.

`root` prefixes every procfs/sysfs/devfs path (`--root DIR` or KIT_DOCTOR_ROOT), so a test or a
saved copy of another host's /proc and /sys can stand in for the real ones. Commands run through
`run` and are found through `which`; both follow PATH.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launcher.doctor import nccl
from launcher.doctor.gpus import COMMAND as GPU_QUERY
from launcher.doctor.power import COMMAND as POWER_QUERY

NVIDIA_SMI = "nvidia-smi"
SMI_ARGS = {
    "topo": ["topo", "-m"],
    "p2p": ["topo", "-p2p", "r"],
    "gpus": GPU_QUERY[1:],
    "power": POWER_QUERY[1:],  # optional: power facts that cannot be read are unknown, never a failure
}
CONTAINER_TOOLS = ("nvidia-ctk", "nvidia-container-cli")


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str

    def first_error_line(self) -> str:
        for text in (self.stderr, self.stdout):
            for line in text.splitlines():
                if line.strip():
                    return line.strip()
        return f"exit status {self.rc}"


def run_command(argv: list[str], timeout: float = 30.0) -> CommandResult:
    """Run without a shell; a missing binary or a timeout becomes a result, not an exception."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{' '.join(argv)} did not answer within {timeout:.0f} s")
    return CommandResult(done.returncode, done.stdout, done.stderr)


@dataclass
class DockerState:
    found: bool
    reachable: bool = False
    runtimes: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class Probe:
    root: Path = Path("/")
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], CommandResult] = run_command
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs
    getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit
    nccl_detect: Callable[[], tuple[nccl.Version | None, str]] = nccl.detect
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    # --- nvidia-smi -------------------------------------------------------------------
    def nvidia_smi(self, what: str) -> CommandResult | None:
        """Output of one of the queries; None when nvidia-smi is not on PATH."""
        exe = self.which(NVIDIA_SMI)
        if exe is None:
            return None
        return self.run([exe, *SMI_ARGS[what]])

    # --- kernel and driver ------------------------------------------------------------
    def cmdline(self) -> str | None:
        text = self.read("/proc/cmdline")
        return None if text is None else text.strip()

    def iommu_group_types(self) -> list[str]:
        """Default domain type of each IOMMU group: identity (passthrough) or DMA/DMA-FQ (translating)."""
        groups = self.path("/sys/kernel/iommu_groups")
        try:
            entries = sorted(groups.iterdir())
        except OSError:
            return []
        types = []
        for g in entries:
            try:
                types.append((g / "type").read_text().strip())
            except OSError:
                continue
        return types

    def uvm_disable_hmm(self) -> tuple[bool, str | None]:
        """(nvidia_uvm loaded, value of its uvm_disable_hmm parameter or None when absent)."""
        loaded = self.path("/sys/module/nvidia_uvm").is_dir()
        value = self.read("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm")
        return loaded, None if value is None else value.strip()

    def rdma_devices(self) -> list[str] | None:
        """RDMA devices the kernel registered (/sys/class/infiniband: mlx5_0, irdma0, ...); [] when sysfs is
        there without that class (no RDMA driver loaded), None when /sys/class cannot be read at all."""
        ib = self.path("/sys/class/infiniband")
        try:
            return sorted(e.name for e in ib.iterdir())
        except FileNotFoundError:
            return [] if self.path("/sys/class").is_dir() else None
        except OSError:
            return None

    def shm_bytes(self) -> int | None:
        try:
            st = self.statvfs(str(self.path("/dev/shm")))
        except OSError:
            return None
        return st.f_blocks * st.f_frsize

    def memlock(self) -> tuple[int, int]:
        return self.getrlimit(resource.RLIMIT_MEMLOCK)

    def nccl_version(self) -> tuple[nccl.Version | None, str]:
        return self.nccl_detect()

    # --- containers -------------------------------------------------------------------
    def docker(self) -> DockerState:
        exe = self.which("docker")
        if exe is None:
            return DockerState(found=False, message="docker not on PATH")
        res = self.run([exe, "info", "--format", "{{json .Runtimes}}"])
        if res.rc != 0:
            return DockerState(found=True, reachable=False, message=res.first_error_line())
        try:
            runtimes = json.loads(res.stdout.strip() or "{}")
        except json.JSONDecodeError:
            return DockerState(found=True, reachable=True, message=f"unreadable `docker info` output: {res.stdout[:80]!r}")
        return DockerState(found=True, reachable=True, runtimes=sorted(runtimes) if isinstance(runtimes, dict) else [])

    def in_container(self) -> bool:
        """Docker creates /.dockerenv, Podman /run/.containerenv (`make doctor` runs in the server container)."""
        return self.path("/.dockerenv").exists() or self.path("/run/.containerenv").exists()

    def container_tools(self) -> list[str]:
        return [t for t in CONTAINER_TOOLS if self.which(t)]
