"""launcher.doctor.gpus: `nvidia-smi --query-gpu=... --format=csv` parsing, with and without header or index."""

from __future__ import annotations

import pytest
from helpers_doctor import assert_format_error, read

from launcher.doctor import gpus


def test_query_is_the_one_the_doctor_runs():
    assert gpus.COMMAND == ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,pci.bus_id", "--format=csv"]


def test_single_h200_real_output():
    (g,) = gpus.parse(read("h200x1_gpus.csv"))
    assert (g.index, g.name, g.compute_cap, g.driver_version, g.bus_id) == (
        0,
        "NVIDIA H200",
        "9.0",
        "580.159.04",
        "00000000:00:06.0",
    )


def test_eight_gpus_in_index_order():
    found = gpus.parse(read("pcie8_gpus.csv"))
    assert [g.index for g in found] == list(range(8))
    assert {g.compute_cap for g in found} == {"12.0"}


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
    ("text", "lineno", "needle"),
    [
        ("name, compute_cap, driver_version, pci.bus_id\nH200, nine, 580, 0:6.0\n", 2, "nine"),
        ("name, compute_cap, driver_version, pci.bus_id\nH200, 9.0\n", 2, "2 values"),
        ("", 1, "empty output"),
        ("name, compute_cap, driver_version, pci.bus_id\n", 1, "a header but no GPU rows"),
        ("index, name, compute_cap\nfirst, H200, 9.0\n", 2, "index 'first'"),
    ],
)
def test_unknown_format_names_the_line(text, lineno, needle):
    assert_format_error(gpus.parse, text, lineno, needle)
