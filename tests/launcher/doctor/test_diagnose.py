"""launcher.doctor.diagnose: one doctor run over saved nvidia-smi files, eligibility through the launcher's rules."""

from __future__ import annotations

from helpers_doctor import files, stub_probe

from launcher.doctor import diagnose
from launcher.profiles.loader import available_names

# --- eligibility through the launcher's rules -------------------------------------------------


def test_eligibility_pcie_host_refuses_symm_mem_and_allows_the_pcie_profiles(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("pcie8"))
    assert r.facts.interconnect == "pcie-cross-socket"
    assert r.facts.nvlink_multicast is False
    assert set(r.eligibility) == set(available_names())
    symm = r.eligibility["symm-mem"]
    assert symm.ok is False
    assert "NVLink multicast" in symm.reason and "SM 12.0" in symm.reason
    for name in ("baseline", "nccl-tuned", "custom-ar", "fused"):
        assert r.eligibility[name].ok, (name, r.eligibility[name].reason)
        assert r.eligibility[name].reason == ""


def test_eligibility_broken_p2p_names_the_pairs(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("pcie8-broken"))
    assert r.facts.p2p_ok is False
    assert r.facts.p2p_bad_pairs == [(0, 7), (2, 5)]
    custom = r.eligibility["custom-ar"]
    assert custom.ok is False
    assert "P2P is not OK between" in custom.reason and "GPU2 and GPU5" in custom.reason and "GPU0 and GPU7" in custom.reason
    assert r.eligibility["baseline"].ok is True  # needs no P2P


def test_eligibility_nvlink_sm90_host_allows_symm_mem(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("nvlink8"))
    assert r.facts.interconnect == "nvlink"
    assert r.facts.nvlink_multicast is True
    assert r.facts.sm_versions == {"9.0"}
    assert r.eligibility["symm-mem"].ok is True, r.eligibility["symm-mem"].reason


def test_eligibility_uses_placeholders_for_unset_model_paths(tmp_path):
    r = diagnose.run(stub_probe(tmp_path, environ={"KIT_TP_SIZE": "4"}), files("switch4"), spec="eagle3")
    assert r.facts.interconnect == "pcie-switch"
    assert r.eligibility["baseline"].ok is True  # MODEL_PATH/DRAFT_MODEL_PATH unset is not a host problem


def test_eligibility_refuses_tp_size_above_gpu_count(tmp_path):
    r = diagnose.run(stub_probe(tmp_path, environ={}), files("switch4"), spec="eagle3")
    assert r.eligibility["baseline"].ok is False
    assert "needs 8 GPUs, this host has 4; export KIT_TP_SIZE=4" in r.eligibility["baseline"].reason


def test_single_gpu_h200(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("h200x1"))
    assert r.facts.interconnect is None and r.facts.p2p_ok is None and r.facts.nvlink_multicast is None
    assert r.facts.numa_nodes == [[0]]
    by_name = {c.name: c for c in r.checks}
    assert by_name["gpu-count"].status == "warn" and "KIT_TP_SIZE=1" in by_name["gpu-count"].fix
    assert by_name["p2p"].detail.startswith("single GPU")
    assert not r.failed


# --- the report ---------------------------------------------------------------------------------


def test_report_json_has_host_facts_keys_and_counts(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("switch4"), nccl_version="2.31.2", spec="eagle3")
    data = r.to_json()
    assert data["schema"] == diagnose.SCHEMA
    assert data["interconnect"] == "pcie-switch" and data["nccl_version"] == "2.31.2"
    assert data["eligibility_spec"] == "eagle3"
    assert data["summary"] == r.counts() and sum(data["summary"].values()) == len(data["checks"])
    assert {"hostname", "kernel"} <= set(data["host"])
    assert r.failed is False
