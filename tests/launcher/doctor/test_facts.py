"""launcher.doctor.facts: the three nvidia-smi outputs (files or live) to HostFacts, details and topology checks."""

from __future__ import annotations

import pytest
from helpers_doctor import FIX, HOSTS, files, live_probe, read, stub_probe

from launcher.doctor import facts as facts_mod
from launcher.doctor.facts import nvlink_multicast
from launcher.doctor.textfmt import FormatError
from launcher.errors import RuntimeFailure, UserError


def test_nvlink_multicast_needs_nvswitch_and_sm90():
    assert nvlink_multicast("nvlink", True, {"9.0"}) is True
    assert nvlink_multicast("nvlink", True, {"8.0"}) is False  # NVLS needs SM 9.0+
    assert nvlink_multicast("nvlink", None, {"9.0"}) is None
    assert nvlink_multicast("nvlink", True, set()) is None
    assert nvlink_multicast("pcie-switch", None, {"12.0"}) is False
    assert nvlink_multicast(None, None, {"9.0"}) is None


def test_files_give_facts_and_details(tmp_path):
    inp = facts_mod.read_inputs(stub_probe(tmp_path), files("pcie8-broken"))
    assert inp.sources == {k: str(v) for k, v in files("pcie8-broken").items()}
    assert [c.name for c in inp.checks] == ["nvidia-smi"] and inp.checks[0].status == "pass"
    facts, details = facts_mod.build(inp, "2.31.2")
    assert facts.interconnect == "pcie-cross-socket" and facts.numa_nodes == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert facts.p2p_ok is False and facts.p2p_bad_pairs == [(0, 7), (2, 5)]
    assert facts.nvlink_multicast is False and facts.nccl_version == "2.31.2"
    assert len(facts.gpus) == 8
    assert details["topology"]["links"]["GPU2"]["GPU5"] == "SYS" and details["topology"]["links"]["GPU0"]["GPU0"] == "X"
    assert details["topology"]["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert facts.rdma_nics == ["mlx5_0", "mlx5_1"]  # what the DeepEP rule reads
    assert [b["pair"] for b in details["p2p_bad"]] == [[0, 7], [2, 5]]
    assert details["p2p_bad"][1]["status"] == "NS" and details["p2p_bad"][1]["meaning"]


def test_nvlink_sm90_host_from_live_nvidia_smi():
    inp = facts_mod.read_inputs(live_probe({"topo": "nvlink8_topo.txt", "p2p": "nvlink8_p2p.txt", "gpus": "nvlink8_gpus.csv"}), {})
    assert inp.sources == {"topo": "nvidia-smi", "p2p": "nvidia-smi", "gpus": "nvidia-smi"}
    facts, details = facts_mod.build(inp, None)
    assert facts.interconnect == "nvlink" and facts.nvlink_multicast is True
    assert details["topology"]["nvswitch"] is True


def test_rdma_nics_are_none_without_a_topology_and_empty_when_it_shows_none(tmp_path):
    probe = stub_probe(tmp_path)
    inp = facts_mod.read_inputs(probe, {"gpus": files("switch4")["gpus"]})
    assert facts_mod.build(inp, None)[0].rdma_nics is None  # not read: unknown, not "none"
    inp = facts_mod.read_inputs(probe, files("switch4"))
    assert facts_mod.build(inp, None)[0].rdma_nics == []


def test_files_win_over_nvidia_smi():
    probe = live_probe({"topo": "switch4_topo.txt", "p2p": "switch4_p2p.txt", "gpus": "switch4_gpus.csv"})
    inp = facts_mod.read_inputs(probe, {"gpus": files("switch4")["gpus"]})
    assert inp.sources == {"topo": "nvidia-smi", "p2p": "nvidia-smi", "gpus": str(files("switch4")["gpus"])}


def test_missing_nvidia_smi_is_a_failed_check_not_an_error(tmp_path):
    inp = facts_mod.read_inputs(stub_probe(tmp_path), {})
    assert inp.topo is None and inp.p2p is None and inp.gpus is None
    [check] = inp.checks
    assert check.name == "nvidia-smi" and check.status == "fail" and "nvidia-smi not found" in check.detail
    facts, details = facts_mod.build(inp, None)
    assert facts.gpus == [] and facts.interconnect is None and "topology" not in details


def test_failing_nvidia_smi_names_the_query_and_its_message():
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    probe = live_probe({"topo": "", "p2p": "", "gpus": ""}, rc=9, stderr=msg + "\n")
    inp = facts_mod.read_inputs(probe, {})
    assert [c.status for c in inp.checks] == ["fail"] * 3
    assert all(msg in c.detail for c in inp.checks)


def test_unparseable_live_output_is_a_failed_check():
    probe = live_probe({"topo": "switch4_gpus.csv", "p2p": "switch4_p2p.txt", "gpus": "switch4_gpus.csv"})
    inp = facts_mod.read_inputs(probe, {})
    assert inp.topo is None and inp.gpus is not None
    [bad] = [c for c in inp.checks if c.status == "fail"]
    assert "output not understood" in bad.detail


def test_unparseable_file_raises_format_error(tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("==============NVSMI LOG==============\n")
    probe = stub_probe(tmp_path)
    with pytest.raises(FormatError, match=f"{bad}:1:"):
        facts_mod.read_inputs(probe, {"topo": bad})
    with pytest.raises(UserError, match="cannot read"):
        facts_mod.read_inputs(probe, {"topo": tmp_path / "missing.txt"})


def test_outputs_of_two_hosts_disagree(tmp_path):
    mixed = {**files("pcie8"), "p2p": files("switch4")["p2p"]}
    with pytest.raises(UserError, match="disagree.*save all three on the same host"):
        facts_mod.read_inputs(stub_probe(tmp_path), mixed)


def test_live_outputs_that_disagree_are_a_runtime_failure_not_a_user_mistake():
    probe = live_probe({"topo": HOSTS["pcie8"][0], "p2p": HOSTS["switch4"][1], "gpus": HOSTS["pcie8"][2]})
    with pytest.raises(RuntimeFailure, match="disagree.*dropped off the bus") as err:
        facts_mod.read_inputs(probe, {})
    assert err.value.exit_code == 1


def test_topology_checks_follow_the_inputs(tmp_path):
    inp = facts_mod.read_inputs(stub_probe(tmp_path), files("switch4"))
    facts, _ = facts_mod.build(inp, None)
    by_name = {c.name: c.status for c in facts_mod.topology_checks(facts, inp, tp=8)}
    assert by_name == {"gpu-count": "warn", "topology": "pass", "p2p": "pass"}
    assert {c.name: c.status for c in facts_mod.topology_checks(facts, inp, tp=4)}["gpu-count"] == "pass"
    assert facts_mod.topology_checks(facts, facts_mod.Inputs(), tp=8) == []


def test_rdma_nics_join_the_topology_legend_and_sys_class_infiniband(tmp_path):
    """DeepEP's rule reads `rdma_nics`: a NIC shown by either source counts, none shown by a readable
    sysfs is "none" even without a topology, and only two unreadable sources leave it unknown."""
    probe = stub_probe(tmp_path)
    ib = probe.root / "sys" / "class" / "infiniband"
    (ib / "irdma0").mkdir(parents=True)
    inp = facts_mod.read_inputs(probe, files("pcie8-broken"))
    assert inp.rdma_devices == ["irdma0"]
    assert facts_mod.build(inp, None)[0].rdma_nics == ["irdma0", "mlx5_0", "mlx5_1"]
    (ib / "irdma0").rmdir()
    ib.rmdir()
    inp = facts_mod.read_inputs(probe, {"gpus": files("switch4")["gpus"]})
    assert facts_mod.build(inp, None)[0].rdma_nics == []


# --- power limits: optional, never a failure ------------------------------------------------


def test_power_limits_from_a_saved_file(tmp_path):
    probe = stub_probe(tmp_path)
    inp = facts_mod.read_inputs(probe, files("pcie8"))
    facts_mod.read_power(probe, FIX / "pcie8_power_capped.csv", inp)
    assert [p.index for p in inp.power if p.capped] == [3, 5]
    assert inp.sources["power"] == str(FIX / "pcie8_power_capped.csv")
    details = facts_mod.build(inp, None)[1]
    assert details["power"]["limits"][3] == {"index": 3, "limit_w": 450.0, "default_w": 600.0, "min_w": 150.0, "max_w": 600.0}


def test_a_power_file_of_other_gpus_or_unreadable_is_exit_2(tmp_path):
    probe = stub_probe(tmp_path)
    inp = facts_mod.read_inputs(probe, files("h200x1"))
    with pytest.raises(UserError, match=r"has GPUs \[0, 1, 2, 3, 4, 5, 6, 7\], the GPU facts \[0\]") as err:
        facts_mod.read_power(probe, FIX / "pcie8_power.csv", inp)
    assert err.value.exit_code == 2
    with pytest.raises(UserError, match="cannot read"):
        facts_mod.read_power(probe, tmp_path / "missing.csv", inp)
    bad = tmp_path / "power.csv"
    bad.write_text(read("h200x1_gpus.csv"))
    with pytest.raises(FormatError, match=f"{bad}:"):
        facts_mod.read_power(probe, bad, inp)


def test_power_limits_read_live_only_beside_live_gpu_facts(tmp_path):
    live = {"topo": HOSTS["pcie8"][0], "p2p": HOSTS["pcie8"][1], "gpus": HOSTS["pcie8"][2]}
    inp = facts_mod.read_inputs(live_probe({**live, "power": "pcie8_power.csv"}), {})
    facts_mod.read_power(live_probe({**live, "power": "pcie8_power.csv"}), None, inp)
    assert inp.sources["power"] == "nvidia-smi" and len(inp.power) == 8 and inp.power_unknown == ""
    # GPU facts from a file: this host's limits would sit beside another host's GPUs, so none are read
    inp = facts_mod.read_inputs(stub_probe(tmp_path), files("pcie8"))
    facts_mod.read_power(live_probe({**live, "power": "pcie8_power.csv"}), None, inp)
    assert inp.power is None and "pass --power-file" in inp.power_unknown and "power" not in inp.sources
    assert facts_mod.build(inp, None)[1]["power"] == {"unknown": inp.power_unknown}


@pytest.mark.parametrize(
    ("power_file", "needle"),
    [
        (None, 'power query failed: Field "--query-gpu=index,power.limit'),  # an nvidia-smi without the fields
        ("pcie8_gpus.csv", "power query not understood"),
        ("gpu1_power_na.csv", "power limits for GPUs [0], not the GPUs it listed before"),
    ],
)
def test_live_power_limits_that_cannot_be_read_are_unknown_not_a_failure(power_file, needle):
    live = {"topo": HOSTS["pcie8"][0], "p2p": HOSTS["pcie8"][1], "gpus": HOSTS["pcie8"][2]}
    probe = live_probe({**live, **({"power": power_file} if power_file else {})})
    inp = facts_mod.read_inputs(probe, {})
    facts_mod.read_power(probe, None, inp)
    assert inp.power is None and needle in inp.power_unknown, inp.power_unknown
    assert [c.status for c in inp.checks] == ["pass"]  # the nvidia-smi check alone, still passing


def test_power_without_any_gpu_facts_is_unknown(tmp_path):
    probe = stub_probe(tmp_path)
    inp = facts_mod.read_inputs(probe, {})
    facts_mod.read_power(probe, None, inp)
    assert inp.power is None and inp.power_unknown == "not read: no GPU facts (see the nvidia-smi check)"
