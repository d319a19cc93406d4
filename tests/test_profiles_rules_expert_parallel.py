"""launcher.profiles.rules.expert_parallel: DeepEP's normal mode and the RDMA NIC its low-latency
mode needs; a passing and a failing case each, with level and message."""

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


# ---- DeepEP needs an RDMA NIC -------------------------------------------------------------------


def test_deepep_without_an_rdma_nic_is_ineligible(make):
    _, findings = make(server={"moe-a2a-backend": "deepep"}, facts=facts("pcie-switch", "12.0", rdma_nics=[]))
    [f] = by_rule(findings, "deepep_needs_rdma_nic", "ineligible")
    assert f.key == "server.moe-a2a-backend" and "IBGDA" in f.message and "legacy.py" in f.message
    with pytest.raises(UserError, match="no RDMA NIC"):
        build_plan("ep-deepep", "eagle3", facts("pcie-switch", "12.0", p2p_ok=True, rdma_nics=[]), environ=ENV)


def test_deepep_nic_unknown_is_a_condition(make):
    plan, findings = make(server={"moe-a2a-backend": "deepep"})
    assert [f.level for f in by_rule(findings, "deepep_needs_rdma_nic")] == ["requires"]
    assert any("RDMA NIC" in c for c in plan.requires["conditions"])


def test_deepep_with_a_nic_over_pcie_warns_about_memory_ordering(make):
    _, findings = make(server={"moe-a2a-backend": "deepep"}, facts=facts("pcie-switch", "12.0", rdma_nics=["mlx5_0"]))
    [f] = by_rule(findings, "deepep_needs_rdma_nic")
    assert f.level == "warning" and "memory-ordering" in f.message


@pytest.mark.parametrize(
    ("server", "host"),
    [({"moe-a2a-backend": "deepep"}, facts("nvlink", "9.0", rdma_nics=["mlx5_0"])), ({"moe-a2a-backend": "none"}, facts("pcie-switch", rdma_nics=[]))],
)
def test_deepep_nic_rule_passes(make, server, host):
    _, findings = make(server=server, facts=host)
    assert by_rule(findings, "deepep_needs_rdma_nic") == []


def test_ep_deepep_profile_passes_on_pcie():
    plan = build_plan("ep-deepep", "eagle3", facts("pcie-switch", "12.0", p2p_ok=True), environ=ENV)
    assert plan.flags[plan.flags.index("--deepep-mode") + 1] == "low_latency"
