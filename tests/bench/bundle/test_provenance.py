"""bench.bundle.provenance: the host fingerprint a bundle carries (the doctor's probes and parsers)."""

from __future__ import annotations

import os

import pytest

from bench.bundle import provenance as bundle_provenance

# ----- host fingerprint from nvidia-smi (the doctor's probes and parsers) --------------------------
# Answers the doctor's three queries: the GPU list as CSV with a header, the topology matrix and the
# P2P matrix, both with the ANSI underline real nvidia-smi prints on its header row.
FAKE_SMI = r'''#!/bin/sh
case "$*" in
  --query-gpu=name,compute_cap,driver_version,pci.bus_id\ --format=csv)
    printf 'name, compute_cap, driver_version, pci.bus_id\n'
    printf 'NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.65.06, 00000000:01:00.0\n'
    printf 'NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.65.06, 00000000:02:00.0\n' ;;
  "topo -m") printf '\t\033[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\033[0m\nGPU0\t X \tNODE\t0-31\t0\t\nGPU1\tNODE\t X \t0-31\t0\t\n' ;;
  "topo -p2p r") printf ' \t\033[4mGPU0\tGPU1\t\033[0m\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n' ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
'''


@pytest.mark.stack
def test_host_fingerprint_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("KIT_NCCL_VERSION", "2.28.9")
    fp = bundle_provenance.host_fingerprint()
    assert fp["available"] is True and fp["reason"] is None
    assert [g["name"] for g in fp["gpus"]] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 2
    assert fp["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "compute_cap": "12.0",
        "driver_version": "580.65.06",
        "bus_id": "00000000:02:00.0",
    }
    assert fp["driver"] == "580.65.06"
    assert "cuda" not in fp  # the doctor's facts carry no CUDA version
    assert fp["nccl"] == "2.28.9" and fp["nccl_source"] == "KIT_NCCL_VERSION"
    assert fp["interconnect"] == "pcie-hostbridge" and fp["numa_nodes"] == [[0, 1]]
    assert fp["p2p_ok"] is True and fp["nvlink_multicast"] is False
    assert fp["sources"] == {"topo": "nvidia-smi", "p2p": "nvidia-smi", "gpus": "nvidia-smi"}
    assert fp["topology"]["links"] == {"GPU0": {"GPU0": "X", "GPU1": "NODE"}, "GPU1": {"GPU0": "NODE", "GPU1": "X"}}
    assert fp["topology"]["cpu_affinity"] == {"0": "0-31", "1": "0-31"}
    assert "\x1b" not in repr(fp)  # the ANSI underline is gone


def test_host_fingerprint_without_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KIT_NCCL_VERSION", "2.28.9")
    fp = bundle_provenance.host_fingerprint()
    assert fp["available"] is False and "nvidia-smi not found" in fp["reason"] and fp["gpus"] == []
    assert fp["driver"] is None and fp["interconnect"] is None and fp["topology"] is None
    assert fp["nccl"] == "2.28.9"  # still recorded: the server image's NCCL, from the environment
