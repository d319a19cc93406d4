"""Host checks: each a small function from what was read to a pass/warn/fail verdict with a fix.

The functions take plain values (text, numbers), never the live system, so each verdict can be
tested on its own; `run_all` feeds them from a Probe.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

from launcher import settings
from launcher.doctor import nccl
from launcher.doctor.p2p import STATUS_MEANING, P2PMatrix
from launcher.doctor.power import PowerLimit, watts
from launcher.doctor.probe import DockerState, Probe

Status = Literal["pass", "warn", "fail"]
GiB = 1 << 30
MiB = 1 << 20
DOCKER_DEFAULT_SHM = 64 * MiB
DEFAULT_TP: int = settings.KIT_TP_SIZE.default or 8


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def tp_size(environ: Mapping[str, str]) -> int:
    """The TP size profiles will use: KIT_TP_SIZE (exit 2 when it is not a whole number >= 1), else its default."""
    return settings.KIT_TP_SIZE.get(environ) or DEFAULT_TP


# --- GPUs and links -------------------------------------------------------------------------


def nvidia_smi_missing() -> Check:
    return Check(
        "nvidia-smi",
        "fail",
        "nvidia-smi not found: install the NVIDIA driver (it ships nvidia-smi) or put it on PATH",
        "install the NVIDIA driver, or pass --topo-file/--p2p-file/--gpus-file with output saved on the GPU host",
    )


def nvidia_smi_failed(what: str, message: str) -> Check:
    return Check(
        "nvidia-smi",
        "fail",
        f"`nvidia-smi {what}` failed: {message}",
        "run `nvidia-smi` by hand; a driver/library mismatch needs a reboot or a driver reinstall",
    )


def nvidia_smi_ok(n_gpus: int, driver: str, sources: Mapping[str, str]) -> Check:
    kinds = {"nvidia-smi" if v == "nvidia-smi" else "saved files" for v in sources.values()}
    where = " and ".join(sorted(kinds)) or "nothing"
    return Check("nvidia-smi", "pass", f"{n_gpus} GPU(s), driver {driver or 'unknown'} (read from {where})")


def gpu_count(n_gpus: int, tp: int) -> Check:
    if n_gpus >= tp:
        return Check("gpu-count", "pass", f"{n_gpus} GPU(s) for tensor-parallel size {tp}")
    return Check(
        "gpu-count",
        "warn",
        f"profiles run with tp-size {tp} but this host has {n_gpus} GPU(s)",
        f"`export KIT_TP_SIZE={n_gpus}` to run the profiles on this host's GPUs",
    )


def topology(interconnect: str | None, numa_nodes: list[list[int]]) -> Check:
    split = " | ".join(",".join(map(str, n)) for n in numa_nodes) or "unknown"
    if interconnect is None:
        return Check("topology", "pass", f"single GPU: no inter-GPU links (NUMA: {split})")
    if interconnect == "pcie-cross-socket":
        return Check(
            "topology",
            "warn",
            f"GPUs span NUMA nodes ({split}); all-reduces cross the CPU socket link (SYS), where small "
            "all-reduces cost 50-300 µs instead of ~24 µs behind a PCIe switch",
            "nothing to change in software; compare profiles with `make allreduce` before trusting any speed-up",
        )
    return Check("topology", "pass", f"{interconnect} (NUMA: {split})")


def p2p(matrix: P2PMatrix) -> Check:
    if matrix.ok is None:
        return Check("p2p", "pass", "single GPU: no peers")
    bad = matrix.bad_pairs()
    if not bad:
        n = len(matrix.gpus)
        return Check("p2p", "pass", f"P2P read OK between all {n * (n - 1) // 2} GPU pairs")
    shown = ", ".join(f"GPU{a}-GPU{b} {s} ({STATUS_MEANING[s]})" for a, b, s in bad[:6])
    more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
    return Check(
        "p2p",
        "warn",
        f"P2P not OK for {len(bad)} pair(s): {shown}{more}; profiles that need P2P are ineligible",
        "check IOMMU/ACS (kernel-cmdline below) and the BIOS (ACS, Above 4G decoding, Resizable BAR), then re-run",
    )


def power_limit(limits: list[PowerLimit]) -> Check:
    """A GPU capped below its default limit runs slower: speed figures taken on it are not comparable."""
    capped = [p for p in limits if p.capped]
    if not capped:
        known = [p for p in limits if p.limit_w is not None and p.default_w is not None]
        if not known:
            return Check("power-limit", "pass", f"power limits of the {len(limits)} GPU(s) unknown: the driver does not report them")
        return Check("power-limit", "pass", f"{len(known)} of {len(limits)} GPU(s) at or above their default power limit")
    shown = ", ".join(f"GPU {p.index} at {watts(p.limit_w)} (default {watts(p.default_w)})" for p in capped)
    return Check(
        "power-limit",
        "warn",
        f"power-capped: {shown}; tokens/s and latency depend on the limit, so compare only results taken under the same limits",
        f"{_restore_power(capped)} restores the default (until reboot), or keep the cap and record it with the results",
    )


def _restore_power(capped: list[PowerLimit]) -> str:
    """One `nvidia-smi -pl` per default wattage, naming its GPUs."""
    by_default: dict[float, list[int]] = {}
    for p in capped:
        by_default.setdefault(p.default_w or 0.0, []).append(p.index)
    return " and ".join(f"`sudo nvidia-smi -i {','.join(map(str, ids))} -pl {w:g}`" for w, ids in by_default.items())


# --- kernel and driver ----------------------------------------------------------------------


def _cmdline_params(cmdline: str) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for tok in cmdline.split():
        if tok == "--":
            break  # the rest belongs to init
        key, _, value = tok.partition("=")
        params.setdefault(key, []).append(value)
    return params


def kernel_cmdline(cmdline: str | None, iommu_types: list[str]) -> Check:
    """IOMMU translating P2P traffic and ACS redirecting it are behind NCCL start-up hangs (field reports §4)."""
    if cmdline is None:
        return Check("kernel-cmdline", "warn", "cannot read /proc/cmdline", "run the doctor on the host (or pass --root)")
    p = _cmdline_params(cmdline)
    pci_opts = {o for v in p.get("pci", []) for o in v.split(",")}
    acs_relaxed = "noacs" in pci_opts or any(o.startswith("disable_acs_redir") for o in pci_opts) or "pcie_acs_override" in p
    acs = "; ACS relaxed on the command line" if acs_relaxed else ""
    off = any(v == "off" for k in ("intel_iommu", "amd_iommu", "iommu") for v in p.get(k, []))
    passthrough = "pt" in p.get("iommu", []) or "1" in p.get("iommu.passthrough", [])
    forced_on = [
        f"{k}={v}"
        for k in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough")
        for v in p.get(k, [])
        if (k == "iommu" and v == "force") or (k == "iommu.passthrough" and v == "0") or (k.endswith("_iommu") and "on" in v.split(","))
    ]
    translating = [t for t in iommu_types if t.upper().startswith("DMA")]
    fix = (
        "add iommu=pt (or amd_iommu=off / intel_iommu=off) and pci=noacs to the kernel command line and "
        "reboot; meanwhile `NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0` avoids the hang"
    )
    hang = ": NCCL P2P can hang at start-up with GPUs at 100% (vllm#33041, nccl#2079)"
    acs_hint = "" if acs_relaxed else "; ACS not relaxed (no pci=noacs)"
    # The IOMMU groups' domain types in sysfs are what the kernel actually did; the command line
    # is only what was asked for, so it decides only when sysfs has no groups.
    if translating:
        why = f"{len(translating)} of {len(iommu_types)} IOMMU group(s) of type {translating[0]}"
        return Check("kernel-cmdline", "warn", f"IOMMU translating without passthrough ({why}){acs_hint}{hang}", fix)
    if iommu_types:
        return Check("kernel-cmdline", "pass", f"IOMMU groups in identity (passthrough) mode{acs}")
    if off:
        return Check("kernel-cmdline", "pass", f"IOMMU off on the command line{acs}")
    if passthrough:
        return Check("kernel-cmdline", "pass", f"IOMMU in passthrough (iommu=pt){acs}")
    if forced_on:
        return Check("kernel-cmdline", "warn", f"IOMMU translating without passthrough ({', '.join(forced_on)}){acs_hint}{hang}", fix)
    return Check("kernel-cmdline", "pass", f"no IOMMU translation configured{acs}")


def uvm_hmm(module_loaded: bool, value: str | None) -> Check:
    """NCCL locked up on SM120 PCIe hosts unless nvidia_uvm ran with uvm_disable_hmm=1 (field reports §4)."""
    fix = "`echo 'options nvidia_uvm uvm_disable_hmm=1' > /etc/modprobe.d/nvidia-uvm.conf`, then reload nvidia_uvm or reboot"
    if not module_loaded:
        return Check("uvm_disable_hmm", "warn", "nvidia_uvm is not loaded (no /sys/module/nvidia_uvm)", fix)
    if value is None:
        return Check("uvm_disable_hmm", "pass", "this nvidia_uvm has no HMM parameter (HMM unsupported)")
    if value.upper() in ("Y", "1"):
        return Check("uvm_disable_hmm", "pass", f"uvm_disable_hmm={value}")
    return Check("uvm_disable_hmm", "warn", f"uvm_disable_hmm={value}: HMM is on, and NCCL has locked up with it", fix)


def shm(total_bytes: int | None, tp: int) -> Check:
    """NCCL's shared-memory transport fills /dev/shm at TP8 (sglang#4259); recipes use 8-32 GiB."""
    fix = f"run the container with --ipc=host or --shm-size={max(8, tp)}g (compose: shm_size)"
    if total_bytes is None:
        return Check("shm", "warn", "cannot stat /dev/shm", fix)
    need = tp * GiB
    size = f"/dev/shm is {total_bytes / GiB:.1f} GiB"
    if total_bytes <= DOCKER_DEFAULT_SHM:
        return Check("shm", "fail", f"{size} (Docker's 64 MiB default): NCCL fails at TP{tp}", fix)
    if total_bytes < need:
        return Check("shm", "warn", f"{size}, under {tp} GiB for TP{tp}", fix)
    return Check("shm", "pass", f"{size}")


def memlock(soft: int, infinity: int = resource.RLIM_INFINITY) -> Check:
    if soft == infinity:
        return Check("memlock", "pass", "ulimit -l unlimited")
    return Check(
        "memlock",
        "warn",
        f"ulimit -l is {soft // 1024} KiB; pinned buffers for NCCL and CUDA IPC may fail to register",
        "run with `--ulimit memlock=-1` (compose: `ulimits: memlock: -1`) or raise memlock in /etc/security/limits.conf",
    )


def nccl_check(version: nccl.Version | None, source: str) -> Check:
    if version is None:
        return Check(
            "nccl",
            "warn",
            f"NCCL version unknown: {source}",
            "run the doctor inside the server image, or pass --nccl-version X.Y.Z",
        )
    found = nccl.problems(version)
    v = nccl.fmt(version)
    if not found:
        return Check("nccl", "pass", f"NCCL {v} ({source}); no known-bad release")
    status: Status = "fail" if any(level == "fail" for level, _ in found) else "warn"
    parts = []
    for level, bad in found:
        kind = "known bad" if level == "fail" else (
            f"between {nccl.fmt(bad.reported)} (reported) and {nccl.fmt(bad.fixed)}, untested for"
        )
        parts.append(f"{kind}: {bad.what} ({bad.ref}: {bad.evidence})")
    target = nccl.fmt(max(bad.fixed for _, bad in found))
    return Check(
        "nccl",
        status,
        f"NCCL {v} ({source}) is " + "; ".join(parts),
        f"use NCCL {target} (the first release reported without these) in the server image, as its default "
        f"NCCL_WHEEL does (`pip install 'nvidia-nccl-cu13=={target}'`, or -cu12)",
    )


# --- containers -----------------------------------------------------------------------------


def docker(state: DockerState, in_container: bool = False) -> Check:
    if not state.found and in_container:
        return Check("docker", "pass", "running inside a container; Docker is the host's business")
    if not state.found:
        return Check("docker", "warn", "docker not found on PATH (fine inside a container; `make up` needs it on the host)", "install Docker Engine: https://docs.docker.com/engine/install/")
    if not state.reachable:
        return Check("docker", "warn", f"docker found but the daemon did not answer: {state.message}", "start the daemon (`systemctl start docker`) or add your user to the docker group")
    return Check("docker", "pass", f"daemon reachable; runtimes: {', '.join(state.runtimes) or 'none listed'}")


def nvidia_runtime(state: DockerState, tools: list[str], in_container: bool = False, gpus_live: bool = False) -> Check:
    fix = "install nvidia-container-toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart docker"
    if in_container and gpus_live:
        return Check("nvidia-container", "pass", "this container sees the GPUs through nvidia-smi, so the NVIDIA runtime works")
    if "nvidia" in state.runtimes:
        return Check("nvidia-container", "pass", "Docker lists the nvidia runtime")
    if tools:
        return Check("nvidia-container", "pass", f"NVIDIA container toolkit on PATH ({', '.join(tools)})")
    if state.reachable:
        return Check("nvidia-container", "fail", "Docker has no nvidia runtime and no nvidia-ctk/nvidia-container-cli is installed: containers will not see the GPUs", fix)
    return Check("nvidia-container", "warn", "no nvidia runtime found (Docker not reachable, no nvidia-ctk/nvidia-container-cli on PATH)", fix)


def run_host_checks(probe: Probe, nccl_override: str | None = None, gpus_live: bool = False) -> tuple[list[Check], str | None]:
    """Kernel, driver, limits, NCCL and container checks; returns them and the NCCL version string.

    `gpus_live`: nvidia-smi ran here and listed GPUs (inside a container that proves the runtime works).
    """
    out = [
        kernel_cmdline(probe.cmdline(), probe.iommu_group_types()),
        uvm_hmm(*probe.uvm_disable_hmm()),
        shm(probe.shm_bytes(), tp_size(probe.environ)),
        memlock(probe.memlock()[0]),
    ]
    if nccl_override:
        version, source = nccl.parse_version(nccl_override), "--nccl-version"
    else:
        version, source = probe.nccl_version()
    out.append(nccl_check(version, source))
    state, inside = probe.docker(), probe.in_container()
    out.append(docker(state, inside))
    out.append(nvidia_runtime(state, probe.container_tools(), inside, gpus_live))
    return out, (nccl.fmt(version) if version else None)
