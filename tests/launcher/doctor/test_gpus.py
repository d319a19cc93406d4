"""launcher.doctor.gpus: `nvidia-smi --query-gpu=... --format=csv` parsing, with and without header or index."""

from __future__ import annotations

import pytest
from helpers_doctor import assert_format_error, read

from launcher.doctor import gpus
from launcher.doctor.probe import CommandResult, Probe

# What a real nvidia-smi knows about one GPU, by --query-gpu field name (a subset of `--help-query-gpu`).
_SMI_FIELDS = {
    "index": "0",
    "name": "NVIDIA H200",
    "compute_cap": "9.0",
    "driver_version": "580.159.04",
    "pci.bus_id": "00000000:00:06.0",
}


def _fake_nvidia_smi(argv: list[str]) -> CommandResult:
    """Answers `--query-gpu=F,... --format=csv[,noheader]` as nvidia-smi does: header, then the values;
    an unknown field is an error, as there."""
    opts = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    fields = opts.get("--query-gpu", "").split(",")
    unknown = [f for f in fields if f not in _SMI_FIELDS]
    if unknown or not opts.get("--format", "").startswith("csv"):
        return CommandResult(2, "", f'Field "{unknown[0] if unknown else ""}" is not a valid field to query.')
    rows = [] if "noheader" in opts["--format"] else [", ".join(fields)]
    rows.append(", ".join(_SMI_FIELDS[f] for f in fields))
    return CommandResult(0, "\n".join(rows) + "\n", "")


def test_the_query_the_doctor_runs_fills_every_gpu_fact():
    """Through the probe, as `launcher doctor` runs it: every field a GpuFact carries comes back filled."""
    probe = Probe(which=lambda n: f"/usr/bin/{n}", run=_fake_nvidia_smi, environ={})
    result = probe.nvidia_smi("gpus")
    assert result is not None and result.rc == 0, result
    (g,) = gpus.parse(result.stdout)
    assert (g.index, g.name, g.compute_cap, g.driver_version, g.bus_id) == (
        0, "NVIDIA H200", "9.0", "580.159.04", "00000000:00:06.0",
    )
    # The fake is strict enough to notice a query that drops or misspells a field.
    assert _fake_nvidia_smi(["nvidia-smi", "--query-gpu=name,pci_bus_id", "--format=csv"]).rc == 2
    (short,) = gpus.parse(_fake_nvidia_smi(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv"]).stdout)
    assert short.driver_version == "" and short.bus_id == ""


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
