"""Parse `nvidia-smi topo -m` and classify how the GPUs talk to each other.

The matrix has one column per device (GPU0.., NIC0.. or, on old drivers, NIC names such as
mlx5_0), then per-GPU columns "CPU Affinity", "NUMA Affinity" and, on newer drivers,
"GPU NUMA ID". Link types: X (self), NV# (bonded NVLinks), PIX, PXB, PHB, NODE, SYS
(SOC on old drivers means SYS). A "NIC Legend:" section maps NIC0.. to device names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from launcher.doctor.textfmt import body_rows, fields, format_error, table_lines

EXPECTED = "output of `nvidia-smi topo -m` (a header row GPU0 GPU1 ... CPU Affinity, then one row per device)"
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_GPU = re.compile(r"^GPU(\d+)$")
_INFO = re.compile(r"affinity|numa", re.IGNORECASE)
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")

# Worst link wins when classifying a PCIe host; the order is NVIDIA's own legend, nearest first.
_PCIE_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
# Most NVLink ports any one GPU has (H100/H200/B200: 18). Equal NV# links between more peers than
# that allows can only come through NVSwitch.
MAX_NVLINKS_PER_GPU = 18


@dataclass
class Topology:
    """The GPU part of the matrix plus each GPU's affinity columns."""

    gpus: list[int]
    links: dict[tuple[int, int], str]  # (a, b) with a != b -> link type
    info: dict[int, dict[str, str]]  # GPU index -> {"CPU Affinity": "0-47", ...}
    nics: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    devices: list[str] = field(default_factory=list)  # every column label, in order

    def link(self, a: int, b: int) -> str:
        return self.links[(a, b)]

    def nic_names(self) -> list[str]:
        """Every NIC the matrix shows, by device name: the legend's (NIC0 -> mlx5_0) and, on old
        drivers, columns named after the device itself."""
        names = set(self.nics.values())
        for label in self.devices:
            if not _GPU.match(label) and not re.fullmatch(r"NIC\d+", label):
                names.add(label)
        return sorted(names)

    def gpu_pairs(self) -> list[tuple[int, int]]:
        return [(a, b) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1 :]]

    def numa_of(self, gpu: int) -> int | None:
        """First NUMA node in the GPU's "NUMA Affinity" column; None when N/A or absent."""
        value = self.info.get(gpu, {}).get("NUMA Affinity", "")
        m = re.match(r"^\s*(\d+)", value)
        return int(m.group(1)) if m else None


def _norm_link(tok: str) -> str:
    return "SYS" if tok == "SOC" else tok


def parse(text: str, source: str = "nvidia-smi topo -m") -> Topology:
    """Parse the matrix; raise FormatError quoting the first line that does not fit."""
    lines, idx = table_lines(text, source, EXPECTED)
    header = fields(lines[idx])
    first_info = next((i for i, h in enumerate(header) if _INFO.search(h)), len(header))
    devices, info_cols = header[:first_info], header[first_info:]
    if not any(_GPU.match(d) for d in devices):
        raise format_error(source, idx + 1, lines[idx], "no GPU0.. columns in the header", EXPECTED)
    stray = [h for h in info_cols if not _INFO.search(h)]
    if stray:
        raise format_error(source, idx + 1, lines[idx], f"unknown column '{stray[0]}' after the affinity columns", EXPECTED)
    if len(set(devices)) != len(devices):
        raise format_error(source, idx + 1, lines[idx], "a device column appears twice", EXPECTED)

    rows: dict[str, list[str]] = {}
    info: dict[int, dict[str, str]] = {}
    body, end = body_rows(lines, idx + 1)
    for i, line, toks in body:
        label, entries = toks[0], toks[1 : 1 + len(devices)]
        if label not in devices:
            raise format_error(source, i + 1, line, f"row label '{label}' is not a column of the header", EXPECTED)
        if label in rows:
            raise format_error(source, i + 1, line, f"row '{label}' appears twice", EXPECTED)
        if len(entries) < len(devices):
            raise format_error(source, i + 1, line, f"row has {len(entries)} link entries, the header has {len(devices)} devices", EXPECTED)
        bad = next((e for e in entries if not _LINK.match(e)), None)
        if bad is not None:
            raise format_error(source, i + 1, line, f"unknown link type '{bad}' (known: X, NV#, PIX, PXB, PHB, NODE, SYS)", EXPECTED)
        if entries[devices.index(label)] != "X":
            raise format_error(source, i + 1, line, f"row '{label}' does not have X in its own column", EXPECTED)
        extra = toks[1 + len(devices) :]
        if len(extra) > len(info_cols):
            raise format_error(source, i + 1, line, f"{len(extra)} values after the links, the header names {len(info_cols)} columns", EXPECTED)
        rows[label] = [_norm_link(e) for e in entries]
        m = _GPU.match(label)
        if m:
            info[int(m.group(1))] = dict(zip(info_cols, extra, strict=False))

    gpu_labels = [d for d in devices if _GPU.match(d)]
    missing = [d for d in gpu_labels if d not in rows]
    if missing:
        at = min(end, len(lines) - 1)
        raise format_error(source, at + 1, lines[at] if lines else "", f"no row for {missing[0]}", EXPECTED)

    nics: dict[str, str] = {}
    for line in lines[end:]:
        m = _NIC_LEGEND.match(line)
        if m:
            nics[m.group(1)] = m.group(2)

    gpus = sorted(int(_GPU.match(d).group(1)) for d in gpu_labels)  # type: ignore[union-attr]
    links: dict[tuple[int, int], str] = {}
    for a in gpus:
        row = rows[f"GPU{a}"]
        for b in gpus:
            if a != b:
                links[(a, b)] = row[devices.index(f"GPU{b}")]
    return Topology(gpus=gpus, links=links, info=info, nics=nics, devices=devices)


def classify(topo: Topology) -> str | None:
    """nvlink | pcie-switch | pcie-hostbridge | pcie-cross-socket; None for fewer than two GPUs.

    NVLink only when every GPU pair is NV#. Otherwise the worst PCIe link between any pair decides
    (pairs that also have NVLink, e.g. bridged pairs, are not counted).
    """
    pairs = topo.gpu_pairs()
    if not pairs:
        return None
    kinds = [topo.link(a, b) for a, b in pairs]
    if all(k.startswith("NV") for k in kinds):
        return "nvlink"
    worst = max(_PCIE_RANK[k] for k in kinds if not k.startswith("NV"))
    if worst >= _PCIE_RANK["SYS"]:
        return "pcie-cross-socket"
    if worst >= _PCIE_RANK["PHB"]:
        return "pcie-hostbridge"
    return "pcie-switch"


def numa_split(topo: Topology) -> list[list[int]]:
    """GPU indices per NUMA node, nodes in ascending order; [] when the driver reports no NUMA affinity."""
    nodes: dict[int, list[int]] = {}
    for g in topo.gpus:
        n = topo.numa_of(g)
        if n is None:
            return []
        nodes.setdefault(n, []).append(g)
    return [nodes[n] for n in sorted(nodes)]


def nvswitch_likely(topo: Topology) -> bool | None:
    """True when equal NV# links join more peers than one GPU has NVLink ports (so NVSwitch).

    None when every pair is NVLink but a direct mesh could explain it (e.g. a bridged pair), and
    for a single GPU.
    """
    kind = classify(topo)
    if kind is None:
        return None
    if kind != "nvlink":
        return False
    counts = {int(topo.link(a, b)[2:]) for a, b in topo.gpu_pairs()}
    if len(counts) == 1 and counts.pop() * (len(topo.gpus) - 1) > MAX_NVLINKS_PER_GPU:
        return True
    return None
