"""launcher.doctor.topo: `nvidia-smi topo -m` parsing, interconnect classification, NUMA split, NVSwitch guess."""

from __future__ import annotations

import pytest
from helpers_doctor import assert_format_error, read

from launcher.doctor import topo
from launcher.doctor.textfmt import strip_ansi


def _matrix(links: dict[tuple[int, int], str], n: int, numa: list[str] | None = None) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    rows = []
    for a in range(n):
        cells = [" X " if a == b else links.get((min(a, b), max(a, b)), "PIX") for b in range(n)]
        rows.append("\t".join([f"GPU{a}", *cells, "0-15", (numa[a] if numa else "0") + "\t", "N/A"]))
    return head + "\n".join(rows) + "\n"


def test_single_h200_real_output():
    t = topo.parse(read("h200x1_topo.txt"))
    assert t.gpus == [0]
    assert t.info[0] == {"CPU Affinity": "0-15", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert topo.classify(t) is None
    assert topo.nvswitch_likely(t) is None
    assert topo.numa_split(t) == [[0]]


def test_pcie_dual_socket_is_cross_socket_with_two_numa_nodes_and_nics():
    t = topo.parse(read("pcie8_dual_socket_topo.txt"))
    assert t.gpus == list(range(8))
    assert t.link(0, 3) == "NODE" and t.link(2, 5) == "SYS"
    assert topo.classify(t) == "pcie-cross-socket"
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert t.devices[-2:] == ["NIC0", "NIC1"]
    assert t.nic_names() == ["mlx5_0", "mlx5_1"]
    assert t.info[5]["CPU Affinity"] == "48-95,144-191"
    assert topo.nvswitch_likely(t) is False


def test_nvlink_host_with_nvswitch():
    t = topo.parse(read("nvlink8_topo.txt"))
    assert topo.classify(t) == "nvlink"
    assert {t.link(a, b) for a, b in t.gpu_pairs()} == {"NV18"}
    assert len(t.nics) == 8
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert topo.nvswitch_likely(t) is True


def test_pcie_switch_host_without_gpu_numa_id_column():
    t = topo.parse(read("switch4_topo.txt"))
    assert topo.classify(t) == "pcie-switch"
    assert topo.numa_split(t) == [[0, 1, 2, 3]]
    assert t.link(0, 1) == "PIX" and t.link(1, 2) == "PXB"
    assert "GPU NUMA ID" not in t.info[0]


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


def test_nics_named_in_their_own_column_on_old_drivers():
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tSOC\tPHB\t0-15\n"
        "GPU1\tSOC\t X \tSOC\t16-31\n"
        "mlx5_0\tPHB\tSOC\t X \n"
    )
    t = topo.parse(text)
    assert t.nic_names() == ["mlx5_0"] and t.gpus == [0, 1]
    assert topo.parse(_matrix({}, 2)).nic_names() == []


def test_old_driver_soc_means_sys():
    t = topo.parse(_matrix({(0, 1): "SOC"}, 2))
    assert t.link(0, 1) == "SYS"
    assert topo.classify(t) == "pcie-cross-socket"


@pytest.mark.parametrize(
    ("text", "lineno", "needle"),
    [
        ("==============NVSMI LOG==============\n\nDriver Version : 580\n", 1, "NVSMI LOG"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFOO\t0-15\nGPU1\tFOO\t X \t0-15\n", 2, "FOO"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-15\nGPU9\tPIX\t X \t0-15\n", 3, "GPU9"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n", 2, "1 link entries"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t0-15\n", 2, "unknown link type '0-15'"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-15\n\nLegend:\n", 3, "no row for GPU1"),
    ],
)
def test_unknown_format_names_the_line(text, lineno, needle):
    assert_format_error(topo.parse, text, lineno, needle)
