"""Parsers for the three nvidia-smi outputs, interconnect classification and NUMA split."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.doctor import gpus, p2p, topo
from launcher.doctor.facts import nvlink_multicast
from launcher.doctor.textfmt import FormatError, strip_ansi

FIX = Path(__file__).parent / "fixtures" / "doctor"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_fixtures_carry_the_ansi_underline_of_real_output():
    for name in ("h200x1_topo.txt", "pcie8_dual_socket_topo.txt", "nvlink8_p2p.txt", "pcie8_p2p_broken.txt"):
        text = read(name)
        assert "\x1b[4m" in text and "\x1b[0m" in text, name
        assert "\x1b" not in strip_ansi(text)


def test_single_h200_real_output():
    t = topo.parse(read("h200x1_topo.txt"))
    assert t.gpus == [0]
    assert t.info[0] == {"CPU Affinity": "0-15", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert topo.classify(t) is None
    assert topo.nvswitch_likely(t) is None
    assert topo.numa_split(t) == [[0]]
    m = p2p.parse(read("h200x1_p2p.txt"))
    assert m.gpus == [0] and m.ok is None and m.bad_pairs() == []
    (g,) = gpus.parse(read("h200x1_gpus.csv"))
    assert (g.index, g.name, g.compute_cap, g.driver_version, g.bus_id) == (
        0,
        "NVIDIA H200",
        "9.0",
        "580.159.04",
        "00000000:00:06.0",
    )


def test_pcie_dual_socket_is_cross_socket_with_two_numa_nodes_and_nics():
    t = topo.parse(read("pcie8_dual_socket_topo.txt"))
    assert t.gpus == list(range(8))
    assert t.link(0, 3) == "NODE" and t.link(2, 5) == "SYS"
    assert topo.classify(t) == "pcie-cross-socket"
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert t.devices[-2:] == ["NIC0", "NIC1"]
    assert t.info[5]["CPU Affinity"] == "48-95,144-191"
    assert topo.nvswitch_likely(t) is False


def test_nvlink_host_with_nvswitch():
    t = topo.parse(read("nvlink8_topo.txt"))
    assert topo.classify(t) == "nvlink"
    assert {t.link(a, b) for a, b in t.gpu_pairs()} == {"NV18"}
    assert len(t.nics) == 8
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert topo.nvswitch_likely(t) is True
    assert nvlink_multicast("nvlink", True, {"9.0"}) is True
    assert nvlink_multicast("nvlink", True, {"8.0"}) is False  # NVLS needs SM 9.0+
    assert nvlink_multicast("nvlink", None, {"9.0"}) is None
    assert nvlink_multicast("pcie-switch", None, {"12.0"}) is False
    assert nvlink_multicast(None, None, {"9.0"}) is None


def test_pcie_switch_host_without_gpu_numa_id_column():
    t = topo.parse(read("switch4_topo.txt"))
    assert topo.classify(t) == "pcie-switch"
    assert topo.numa_split(t) == [[0, 1, 2, 3]]
    assert t.link(0, 1) == "PIX" and t.link(1, 2) == "PXB"
    assert "GPU NUMA ID" not in t.info[0]


def _matrix(links: dict[tuple[int, int], str], n: int, numa: list[str] | None = None) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    rows = []
    for a in range(n):
        cells = [" X " if a == b else links.get((min(a, b), max(a, b)), "PIX") for b in range(n)]
        rows.append("\t".join([f"GPU{a}", *cells, "0-15", (numa[a] if numa else "0") + "\t", "N/A"]))
    return head + "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        ({}, "pcie-switch"),
        ({(0, 1): "PXB"}, "pcie-switch"),
        ({(0, 2): "PHB"}, "pcie-hostbridge"),
        ({(1, 2): "NODE"}, "pcie-hostbridge"),
        ({(0, 3): "SYS"}, "pcie-cross-socket"),
        ({(0, 1): "NV4", (0, 2): "NV4", (0, 3): "NV4", (1, 2): "NV4", (1, 3): "NV4", (2, 3): "NV4"}, "nvlink"),
        # NVLink bridge on one pair, the rest over PCIe: the PCIe links decide.
        ({(0, 1): "NV12", (2, 3): "NV12", (0, 2): "NODE"}, "pcie-hostbridge"),
    ],
)
def test_classification(links, expected):
    assert topo.classify(topo.parse(_matrix(links, 4))) == expected


def test_direct_nvlink_mesh_is_not_assumed_to_have_multicast():
    links = {(a, b): "NV4" for a in range(4) for b in range(a + 1, 4)}
    t = topo.parse(_matrix(links, 4))
    assert topo.classify(t) == "nvlink"
    assert topo.nvswitch_likely(t) is None  # 4 links x 3 peers fit in 12 ports: could be a direct mesh


def test_numa_na_gives_no_split():
    t = topo.parse(_matrix({}, 2, numa=["N/A", "N/A"]))
    assert topo.numa_split(t) == []


def test_space_aligned_copy_parses_like_tabs():
    text = strip_ansi(read("pcie8_dual_socket_topo.txt")).replace("\t", "    ")
    t = topo.parse(text)
    assert topo.classify(t) == "pcie-cross-socket"
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_old_driver_soc_means_sys():
    t = topo.parse(_matrix({(0, 1): "SOC"}, 2))
    assert t.link(0, 1) == "SYS"
    assert topo.classify(t) == "pcie-cross-socket"


def test_p2p_broken_pairs_with_statuses():
    m = p2p.parse(read("pcie8_p2p_broken.txt"))
    assert m.gpus == list(range(8))
    assert m.ok is False
    assert m.bad_pairs() == [(0, 7, "CNS"), (2, 5, "NS")]
    assert m.status[(5, 2)] == "NS" and m.status[(1, 2)] == "OK"
    assert p2p.parse(read("pcie8_p2p_ok.txt")).ok is True


def test_p2p_one_direction_bad_counts():
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tTNS\tX\t\n"
    m = p2p.parse(text)
    assert m.bad_pairs() == [(0, 1, "TNS")]


def test_gpus_csv_variants():
    noheader = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.95.05, 00000000:01:00.0\n"
    (g,) = gpus.parse(noheader)
    assert g.compute_cap == "12.0" and g.bus_id == "00000000:01:00.0"
    with_index = "index, name, compute_cap\n3, NVIDIA H200, 9.0\n"
    (g,) = gpus.parse(with_index)
    assert g.index == 3 and g.driver_version == ""
    na = "name, compute_cap, driver_version, pci.bus_id\nTesla V100, [N/A], 470.1, 0:1:0.0\n"
    assert gpus.parse(na)[0].compute_cap == ""


@pytest.mark.parametrize(
    ("parser", "text", "lineno", "needle"),
    [
        (topo.parse, "==============NVSMI LOG==============\n\nDriver Version : 580\n", 1, "NVSMI LOG"),
        (topo.parse, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFOO\t0-15\nGPU1\tFOO\t X \t0-15\n", 2, "FOO"),
        (topo.parse, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-15\nGPU9\tPIX\t X \t0-15\n", 3, "GPU9"),
        (topo.parse, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n", 2, "1 link entries"),
        (topo.parse, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t0-15\n", 2, "unknown link type '0-15'"),
        (topo.parse, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-15\n\nLegend:\n", 3, "no row for GPU1"),
        (p2p.parse, " \tGPU0\tGPU1\t\n GPU0\tX\tMAYBE\t\n GPU1\tOK\tX\t\n", 2, "MAYBE"),
        (p2p.parse, "GPU0 GPU1 CPU Affinity\n", 1, "GPU0 GPU1 CPU Affinity"),
        (gpus.parse, "name, compute_cap, driver_version, pci.bus_id\nH200, nine, 580, 0:6.0\n", 2, "nine"),
        (gpus.parse, "name, compute_cap, driver_version, pci.bus_id\nH200, 9.0\n", 2, "2 values"),
    ],
)
def test_unknown_format_names_the_line(parser, text, lineno, needle):
    with pytest.raises(FormatError) as err:
        parser(text, "saved.txt")
    msg = str(err.value)
    assert msg.startswith(f"saved.txt:{lineno}: ")
    assert needle in msg
    assert err.value.exit_code == 2
