"""launcher.profiles.rules.expert_parallel: DeepEP's normal mode, and what its low-latency mode needs
within a host (P2P between every pair and an RDMA NIC); a passing and a failing case each, with level
and message."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_profiles import ENV, facts
from helpers_rules import NVLINK, PCIE, by_rule

from launcher.errors import UserError
from launcher.profiles.plan import build_plan

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


# ---- (f) DeepEP normal mode ---------------------------------------------------------------------

DEEPEP_NORMAL = {"moe-a2a-backend": "deepep", "deepep-mode": "normal"}


def test_deepep_normal_on_pcie_is_an_error(make):
    _, findings = make(server=DEEPEP_NORMAL, facts=PCIE)
    [f] = by_rule(findings, "deepep_normal_mode", "error")
    assert f.key == "server.deepep-mode" and 'deepep-mode = "low_latency"' in f.message


def test_deepep_normal_on_nvlink_is_a_warning(make):
    plan, findings = make(server=DEEPEP_NORMAL, facts=NVLINK)
    found = by_rule(findings, "deepep_normal_mode")
    assert [f.level for f in found] == ["warning"]
    assert found[0].message in plan.warnings


def test_deepep_normal_without_facts_warns_and_requires_nvlink(make):
    plan, findings = make(server=DEEPEP_NORMAL)
    assert sorted(f.level for f in by_rule(findings, "deepep_normal_mode")) == ["requires", "warning"]
    assert any("NVLink" in c for c in plan.requires["conditions"])


def test_deepep_normal_under_nccl_tuned_inherits_the_pcie_requirement(make):
    _, findings = make(extends="nccl-tuned", server=DEEPEP_NORMAL)
    assert len(by_rule(findings, "deepep_normal_mode", "error")) == 1


def test_deepep_normal_in_an_ep_deepep_child_on_pcie(make):
    _, findings = make(extends="ep-deepep", server={"deepep-mode": "normal"}, facts=PCIE)
    assert len(by_rule(findings, "deepep_normal_mode", "error")) == 1


@pytest.mark.parametrize(
    "server", [{"moe-a2a-backend": "deepep", "deepep-mode": "low_latency"}, {"deepep-mode": "normal"}]
)
def test_deepep_rule_passes(make, server):
    _, findings = make(server=server, facts=PCIE)
    assert by_rule(findings, "deepep_normal_mode") == []


# ---- DeepEP low-latency within a host: P2P and an RDMA NIC ------------------------------------------------

RULE = "deepep_low_latency_transport"
DEEPEP = {"moe-a2a-backend": "deepep"}


def test_ep_deepep_without_an_rdma_nic_is_ineligible():
    """Low-latency mode forces IBGDA on and the dispatch kernel asserts its QP count on every launch
    (legacy.py:105-110, internode_ll.cu:284); local transfers use RDMA too (DeepEP#164)."""
    with pytest.raises(UserError, match="found no RDMA NIC") as err:
        build_plan("ep-deepep", "eagle3", facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=[]), environ=ENV)
    assert "internode_ll.cu:284" in str(err.value) and "DeepEP#164" in str(err.value)


def test_ep_deepep_without_a_nic_is_ineligible_on_nvlink_too(make):
    _, findings = make(server=DEEPEP, facts=facts("nvlink", "9.0", p2p_ok=True, rdma_nics=[]))
    [f] = by_rule(findings, RULE, "ineligible")
    assert f.key == "server.moe-a2a-backend" and "use the ep profile" in f.message


def test_ep_deepep_with_a_nic_and_p2p_is_eligible_and_warns_over_pcie():
    plan, findings = build_plan_findings("ep-deepep", facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=["mlx5_0"]))
    assert not [f for f in findings if f.level in ("error", "ineligible")]
    assert not any("RDMA NIC" in c for c in plan.requires.get("conditions", []))
    assert any("memory-ordering" in w for w in plan.warnings)


def build_plan_findings(name, host):
    from launcher.profiles import plan as plans

    return plans.evaluate(name, "eagle3", host, environ=ENV)


def test_ep_deepep_without_p2p_is_ineligible_naming_the_pairs():
    with pytest.raises(UserError, match="P2P is not OK between GPU0 and GPU3"):
        build_plan("ep-deepep", "eagle3", facts("pcie-switch", "12.0", p2p_ok=False, bad_pairs=[(0, 3)], rdma_nics=["mlx5_0"]), environ=ENV)


def test_deepep_without_p2p_in_a_profile_that_does_not_require_it(make):
    _, findings = make(server=DEEPEP, facts=facts("pcie-switch", "12.0", p2p_ok=False, bad_pairs=[(1, 2)], rdma_nics=["mlx5_0"]))
    [f] = by_rule(findings, "deepep_low_latency_transport", "ineligible")
    assert f.key == "server.moe-a2a-backend" and "GPU1 and GPU2" in f.message and "legacy.py:108" in f.message


def test_deepep_p2p_unknown_is_a_condition(make):
    plan, findings = make(server=DEEPEP)
    assert sorted(f.level for f in by_rule(findings, RULE)) == ["requires", "requires"]
    assert any("peer-to-peer access between every GPU pair" in c for c in plan.requires["conditions"])
    assert any(c.startswith("an RDMA NIC") and "internode_ll.cu:284" in c for c in plan.requires["conditions"])


def test_deepep_with_a_nic_over_pcie_only_warns_about_memory_ordering(make):
    _, findings = make(server=DEEPEP, facts=facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=["mlx5_0"]))
    [f] = by_rule(findings, RULE)
    assert f.level == "warning" and "memory-ordering" in f.message and "legacy.py:56-57" in f.message


def test_deepep_refuses_more_than_two_pcie_named_gpus(make):
    host = facts("pcie-switch", "8.0", p2p_ok=True, rdma_nics=["mlx5_0"])
    for g in host.gpus:
        g.name = "NVIDIA A100-PCIE-40GB"
    _, findings = make(server={**DEEPEP, "tp-size": "8"}, facts=host)
    [f] = by_rule(findings, RULE, "ineligible")
    assert "A100-PCIE-40GB" in f.message and "DeepEP deep_ep/utils/envs.py:155-156" in f.message
    _, two = make(server={**DEEPEP, "tp-size": "2"}, facts=host)
    assert by_rule(two, RULE, "ineligible") == []


def test_the_pcie_name_check_is_case_sensitive_like_deepeps(make):
    """`'PCIE' in torch.cuda.get_device_name()` (envs.py:155): RTX PRO 6000 names do not match it."""
    host = facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=["mlx5_0"])
    for g in host.gpus:
        g.name = "NVIDIA RTX PRO 6000 Blackwell Server Edition (PCIe)"
    _, findings = make(server={**DEEPEP, "tp-size": "8"}, facts=host)
    assert by_rule(findings, RULE, "ineligible") == []


@pytest.mark.parametrize(
    ("server", "host"),
    [
        (DEEPEP, facts("nvlink", "9.0", p2p_ok=True, rdma_nics=["mlx5_0"])),  # NVLink with a NIC: nothing to say
        ({"moe-a2a-backend": "none"}, facts("pcie-switch", p2p_ok=False, rdma_nics=[])),
        ({"moe-a2a-backend": "deepep", "deepep-mode": "normal"}, facts("pcie-switch", p2p_ok=True, rdma_nics=[])),
    ],
)
def test_deepep_transport_rule_passes(make, server, host):
    _, findings = make(server=server, facts=host)
    assert by_rule(findings, RULE) == []


def test_ep_deepep_profile_passes_on_pcie():
    plan = build_plan("ep-deepep", "eagle3", facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=["mlx5_0"]), environ=ENV)
    assert plan.flags[plan.flags.index("--deepep-mode") + 1] == "low_latency"


@pytest.mark.parametrize(("nics", "shown"), [([], "none"), (["mlx5_0", "mlx5_1"], "mlx5_0, mlx5_1")])
def test_the_doctor_reports_rdma_nics_in_its_facts_table(nics, shown):
    from rich.console import Console

    from launcher.doctor import report
    from launcher.doctor.diagnose import Report

    console = Console(width=200, record=True)
    console.print(report.facts_table(Report(facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=nics), {}, [], {})))
    row = next(line for line in console.export_text().splitlines() if "RDMA NICs" in line)
    assert shown in row and "DeepEP" not in row
