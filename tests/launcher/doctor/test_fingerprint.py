"""launcher.doctor.fingerprint: the host fingerprint a bench bundle carries, from the doctor's probes and parsers."""

from __future__ import annotations

from helpers_doctor import HOSTS, live_probe, stub_probe

from launcher.doctor.fingerprint import host_fingerprint

KEYS = {"available", "reason", "gpus", "driver", "interconnect", "numa_nodes", "p2p_ok", "nvlink_multicast",
        "rdma_nics", "nccl", "nccl_source", "topology", "sources"}


def _host(name: str) -> dict[str, str]:
    return dict(zip(("topo", "p2p", "gpus"), HOSTS[name], strict=True))


def test_fingerprint_of_a_live_pcie_host():
    probe = live_probe(_host("pcie8-broken"))
    probe.nccl_detect = lambda: ((2, 27, 7), "torch.cuda.nccl.version()")
    fp = host_fingerprint(probe)
    assert set(fp) == KEYS
    assert fp["available"] is True and fp["reason"] is None
    assert len(fp["gpus"]) == 8
    assert set(fp["gpus"][3]) == {"index", "name", "compute_cap", "driver_version", "bus_id"}
    assert fp["gpus"][3]["bus_id"] == "00000000:61:00.0"
    assert fp["driver"] == "580.95.05"
    assert fp["interconnect"] == "pcie-cross-socket" and fp["numa_nodes"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert fp["p2p_ok"] is False and fp["nvlink_multicast"] is False
    assert fp["rdma_nics"] == ["mlx5_0", "mlx5_1"]
    assert fp["nccl"] == "2.27.7" and fp["nccl_source"] == "torch.cuda.nccl.version()"
    assert fp["topology"]["links"]["GPU0"]["GPU7"] == "SYS"
    assert fp["sources"] == {"topo": "nvidia-smi", "p2p": "nvidia-smi", "gpus": "nvidia-smi"}


def test_kit_nccl_version_wins_over_detection():
    probe = live_probe(_host("nvlink8"))
    probe.environ = {"KIT_NCCL_VERSION": "2.28.9"}
    probe.nccl_detect = lambda: ((2, 21, 5), "must not be used")
    fp = host_fingerprint(probe)
    assert (fp["nccl"], fp["nccl_source"]) == ("2.28.9", "KIT_NCCL_VERSION")
    assert fp["interconnect"] == "nvlink" and fp["nvlink_multicast"] is True


def test_no_nvidia_smi_is_unavailable_with_the_reason(tmp_path):
    fp = host_fingerprint(stub_probe(tmp_path))
    assert set(fp) == KEYS
    assert fp["available"] is False and fp["gpus"] == [] and fp["driver"] is None
    # a fact for the bundle, not the doctor's advice: a SIMULATED demo's summary must not tell anyone to install a driver
    assert fp["reason"] == "nvidia-smi not found where the bench ran: no GPU seen there"
    assert "install" not in fp["reason"]
    assert fp["interconnect"] is None and fp["topology"] is None and fp["sources"] == {}
    assert fp["rdma_nics"] is None
    assert (fp["nccl"], fp["nccl_source"]) == ("2.31.2", "stub")  # still detected without GPUs


def test_failing_nvidia_smi_gives_its_message_as_the_reason():
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    probe = live_probe(_host("h200x1"), rc=9, stderr=msg)
    probe.nccl_detect = lambda: (None, "not found")
    fp = host_fingerprint(probe)
    assert fp["available"] is False and msg in fp["reason"]
    assert fp["nccl"] is None and fp["nccl_source"] == "not found"


def test_outputs_that_disagree_make_an_unavailable_fingerprint_not_an_error():
    """A GPU that drops off the bus between the queries: the bench records why, and goes on."""
    probe = live_probe({"topo": HOSTS["pcie8"][0], "p2p": HOSTS["switch4"][1], "gpus": HOSTS["pcie8"][2]})
    probe.nccl_detect = lambda: ((2, 28, 9), "torch.cuda.nccl.version()")
    fp = host_fingerprint(probe)
    assert set(fp) == KEYS
    assert fp["available"] is False and fp["reason"].startswith("nvidia-smi outputs disagree")
    assert fp["nccl"] == "2.28.9"
