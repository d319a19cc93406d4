"""From the three `nvidia-smi` outputs (files or live) to HostFacts plus the details behind them; the
power limits (a fourth, optional query) go into the details only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.doctor import checks
from launcher.doctor import gpus as gpus_mod
from launcher.doctor import p2p as p2p_mod
from launcher.doctor import power as power_mod
from launcher.doctor import topo as topo_mod
from launcher.doctor.checks import Check
from launcher.doctor.probe import SMI_ARGS, Probe
from launcher.doctor.textfmt import FormatError
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles.hostfacts import GpuFact, HostFacts

PARSERS = {"topo": topo_mod.parse, "p2p": p2p_mod.parse, "gpus": gpus_mod.parse}


@dataclass
class Inputs:
    """Parsed outputs (None when unavailable) and where each came from."""

    topo: topo_mod.Topology | None = None
    p2p: p2p_mod.P2PMatrix | None = None
    gpus: list[GpuFact] | None = None
    rdma_devices: list[str] | None = None  # /sys/class/infiniband; None: not readable
    power: list[power_mod.PowerLimit] | None = None
    power_unknown: str = ""  # why `power` is None
    sources: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)


def read_inputs(probe: Probe, files: dict[str, Path | None]) -> Inputs:
    """Files win; the rest comes from nvidia-smi. Unparseable files raise (exit 2); a missing or
    failing nvidia-smi becomes a fail check instead, so the report still shows everything else."""
    out = Inputs()
    parsed: dict[str, object] = {}
    missing_smi = False
    for what in ("topo", "p2p", "gpus"):
        path = files.get(what)
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UserError(f"{path}: cannot read ({exc.strerror}); pass the file saved from `nvidia-smi {' '.join(SMI_ARGS[what])}`") from exc
            parsed[what] = PARSERS[what](text, str(path))
            out.sources[what] = str(path)
            continue
        res = probe.nvidia_smi(what)
        if res is None:
            missing_smi = True
            continue
        label = f"nvidia-smi {' '.join(SMI_ARGS[what])}"
        if res.rc != 0:
            out.checks.append(checks.nvidia_smi_failed(" ".join(SMI_ARGS[what]), res.first_error_line()))
            continue
        try:
            parsed[what] = PARSERS[what](res.stdout, label)
        except FormatError as exc:
            out.checks.append(checks.nvidia_smi_failed(" ".join(SMI_ARGS[what]), f"output not understood: {exc}"))
            continue
        out.sources[what] = "nvidia-smi"
    if missing_smi:
        out.checks.insert(0, checks.nvidia_smi_missing())
    out.topo = parsed.get("topo")  # type: ignore[assignment]
    out.p2p = parsed.get("p2p")  # type: ignore[assignment]
    out.gpus = parsed.get("gpus")  # type: ignore[assignment]
    out.rdma_devices = probe.rdma_devices()
    _agree(out)
    if not out.checks and out.gpus is not None:
        driver = out.gpus[0].driver_version if out.gpus else ""
        out.checks.append(checks.nvidia_smi_ok(len(out.gpus), driver, out.sources))
    return out


def read_power(probe: Probe, path: Path | None, inp: Inputs) -> None:
    """Power limits from `path`, else from nvidia-smi when the GPU facts came from it too (never this
    host's limits beside another host's GPUs). Missing or unreadable live output leaves them unknown,
    with the reason; a saved file that is not the expected output, or of other GPUs, is exit 2. Only the
    doctor reads them (a bench's host fingerprint does not run the extra query)."""
    label = f"nvidia-smi {' '.join(SMI_ARGS['power'])}"
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror}); pass the file saved from `{label}`") from exc
        limits = power_mod.parse(text, str(path))
        if inp.gpus is not None and sorted(p.index for p in limits) != sorted(g.index for g in inp.gpus):
            raise UserError(f"{path} has GPUs {sorted(p.index for p in limits)}, the GPU facts "
                            f"{sorted(g.index for g in inp.gpus)}; save `{label}` on the same host")
        inp.power, inp.sources["power"] = limits, str(path)
        return
    if inp.gpus is None:
        inp.power_unknown = "not read: no GPU facts (see the nvidia-smi check)"
        return
    if inp.sources.get("gpus") != "nvidia-smi":
        inp.power_unknown = "not read: the GPU facts came from a file; pass --power-file, saved beside it"
        return
    res = probe.nvidia_smi("power")
    if res is None or res.rc != 0:
        inp.power_unknown = f"nvidia-smi's power query failed: {res.first_error_line() if res else 'nvidia-smi not found'}"
        return
    try:
        limits = power_mod.parse(res.stdout, label)
    except FormatError as exc:
        inp.power_unknown = f"nvidia-smi's power query not understood: {str(exc).split('; expected')[0]}"
        return
    if sorted(p.index for p in limits) != sorted(g.index for g in inp.gpus or []):
        inp.power_unknown = f"nvidia-smi listed power limits for GPUs {sorted(p.index for p in limits)}, not the GPUs it listed before"
        return
    inp.power, inp.sources["power"] = limits, "nvidia-smi"


def _agree(inp: Inputs) -> None:
    """All three outputs must describe the same GPUs, or the facts would mix two hosts."""
    seen = {}
    if inp.topo is not None:
        seen["topo"] = inp.topo.gpus
    if inp.p2p is not None:
        seen["p2p"] = inp.p2p.gpus
    if inp.gpus is not None:
        seen["gpus"] = sorted(g.index for g in inp.gpus)
    if len({tuple(v) for v in seen.values()}) > 1:
        desc = ", ".join(f"{inp.sources.get(k, k)} ({k}) has GPUs {v}" for k, v in seen.items())
        if all(inp.sources.get(k) == "nvidia-smi" for k in seen):  # live: the host changed between queries
            raise RuntimeFailure(f"the nvidia-smi outputs disagree ({desc}); a GPU may have dropped off the bus, "
                                 "check `nvidia-smi` and run again")
        raise UserError(f"the nvidia-smi outputs disagree ({desc}); save all three on the same host")


def nvlink_multicast(interconnect: str | None, nvswitch: bool | None, sm_versions: set[str]) -> bool | None:
    """Multicast objects need NVSwitch and SM 9.0+: False on PCIe, True for a switched NVLink host of
    SM 9.x or newer, None (unknown) for one GPU or an NVLink mesh that may be direct."""
    if interconnect is None:
        return None
    if interconnect != "nvlink":
        return False
    if nvswitch is not True or not sm_versions:
        return None
    return all(int(s.split(".")[0]) >= 9 for s in sm_versions)


def rdma_nics(inp: Inputs) -> list[str] | None:
    """RDMA NICs from both places that show them: the NIC legend of `nvidia-smi topo -m` and
    /sys/class/infiniband. None only when neither could be read (unknown, not "none")."""
    seen = [names for names in (inp.topo.nic_names() if inp.topo else None, inp.rdma_devices) if names is not None]
    return sorted(set().union(*seen)) if seen else None


def build(inp: Inputs, nccl_version: str | None) -> tuple[HostFacts, dict]:
    """HostFacts for the launcher's rules, plus details (links, affinity, NICs) for people."""
    gpus = list(inp.gpus or [])
    interconnect = topo_mod.classify(inp.topo) if inp.topo else None
    numa = topo_mod.numa_split(inp.topo) if inp.topo else []
    bad = inp.p2p.bad_pairs() if inp.p2p else []
    facts = HostFacts(
        gpus=gpus,
        interconnect=interconnect,
        numa_nodes=numa,
        p2p_ok=inp.p2p.ok if inp.p2p else None,
        p2p_bad_pairs=[(a, b) for a, b, _ in bad],
        nvlink_multicast=nvlink_multicast(
            interconnect,
            topo_mod.nvswitch_likely(inp.topo) if inp.topo else None,
            {g.compute_cap for g in gpus if g.compute_cap},
        ),
        nccl_version=nccl_version,
        rdma_nics=rdma_nics(inp),
    )
    details: dict = {"sources": dict(inp.sources)}
    if inp.topo is not None:
        t = inp.topo
        details["topology"] = {
            "links": {f"GPU{a}": {f"GPU{b}": ("X" if a == b else t.link(a, b)) for b in t.gpus} for a in t.gpus},
            "cpu_affinity": {str(g): t.info.get(g, {}).get("CPU Affinity", "") for g in t.gpus},
            "numa_affinity": {str(g): t.info.get(g, {}).get("NUMA Affinity", "") for g in t.gpus},
            "nics": t.nics,
            "nvswitch": topo_mod.nvswitch_likely(t),
        }
    details["power"] = power_details(inp)
    if inp.p2p is not None:
        details["p2p_bad"] = [{"pair": [a, b], "status": s, "meaning": p2p_mod.STATUS_MEANING[s]} for a, b, s in bad]
    return facts, details


def power_details(inp: Inputs) -> dict:
    """`{"limits": [{index, limit_w, default_w, min_w, max_w}, ...]}`, or `{"unknown": why}`."""
    if inp.power is None:
        return {"unknown": inp.power_unknown or "not read"}
    return {"limits": [p.to_dict() for p in inp.power]}


def topology_checks(facts: HostFacts, inp: Inputs, tp: int) -> list[Check]:
    out: list[Check] = []
    if inp.gpus is not None:
        out.append(checks.gpu_count(len(inp.gpus), tp))
    if inp.topo is not None:
        out.append(checks.topology(facts.interconnect, facts.numa_nodes))
    if inp.p2p is not None:
        out.append(checks.p2p(inp.p2p))
    return out
