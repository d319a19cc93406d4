"""launcher.profiles.rules.nccl_env: Tree under CUDA graphs, LL128 over PCIe, NCCL_PROTO without
Simple and misspelt NCCL names; a passing and a failing case each, with level and message."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_profiles import ENV, facts
from helpers_rules import NVLINK, PCIE, by_rule

from launcher.errors import UserError
from launcher.profiles.plan import build_plan, evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


# ---- (a) NCCL_ALGO=Tree with CUDA graphs --------------------------------------------------------


@pytest.mark.parametrize(
    "algo", ["Tree", "tree", "Ring,Tree", "allreduce:tree", "allreduce:tree;broadcast:ring"]
)
def test_tree_with_cuda_graphs_is_an_error(make, algo):
    _, findings = make(env={"NCCL_ALGO": algo})
    [f] = by_rule(findings, "tree_with_cuda_graphs", "error")
    assert f.key == "env.NCCL_ALGO" and f.file == make.path
    assert "NCCL_ALGO=Ring" in f.message
    with pytest.raises(UserError) as exc:
        build_plan("t", "off", environ=ENV)
    assert str(make.path) in str(exc.value) and "env.NCCL_ALGO" in str(exc.value)


@pytest.mark.parametrize("algo", ["Ring", "^Tree", "allreduce:ring;broadcast:ring", "NVLSTree"])
def test_tree_rule_passes_without_tree(make, algo):
    _, findings = make(env={"NCCL_ALGO": algo})
    assert by_rule(findings, "tree_with_cuda_graphs") == []


@pytest.mark.parametrize(
    "config", ['{"decode": {"backend": "full"}}', '{"prefill": {"backend": "disabled"}}', "not json", "[]"]
)
def test_tree_with_a_graph_config_that_keeps_decode_graphs_is_an_error(make, config):
    _, findings = make(env={"NCCL_ALGO": "Tree"}, server={"cuda-graph-config": config})
    assert len(by_rule(findings, "tree_with_cuda_graphs", "error")) == 1


@pytest.mark.parametrize(
    "graphs_off",
    [
        {"cuda-graph-backend-decode": "disabled"},
        {"disable-decode-cuda-graph": True},
        {"disable-cuda-graph": True},
        {"cuda-graph-config": '{"decode": {"backend": "disabled"}}'},
    ],
)
def test_tree_allowed_when_cuda_graphs_are_off(make, graphs_off):
    _, findings = make(env={"NCCL_ALGO": "Tree"}, server=graphs_off)
    assert by_rule(findings, "tree_with_cuda_graphs") == []


def test_bug_tree_after_global_exclusion_list_is_missed(make):
    """NCCL_ALGO="^Ring;allreduce:tree" forces Tree for all-reduce (NCCL's per-collective syntax)."""
    _, findings = make(env={"NCCL_ALGO": "^Ring;allreduce:tree"})
    assert len(by_rule(findings, "tree_with_cuda_graphs", "error")) == 1


def test_bug_per_collective_tree_exclusion_is_not_tree(make):
    """NCCL_ALGO="allreduce:^tree" means everything except Tree for all-reduce."""
    _, findings = make(env={"NCCL_ALGO": "allreduce:^tree"})
    assert by_rule(findings, "tree_with_cuda_graphs") == []


# ---- (b) LL128 on PCIe --------------------------------------------------------------------------


@pytest.mark.parametrize("proto", ["LL128", "LL,LL128,Simple", "^LL", "^Simple"])
@pytest.mark.parametrize("interconnect", ["pcie-switch", "pcie-hostbridge", "pcie-cross-socket"])
def test_ll128_on_pcie_facts_is_an_error(make, proto, interconnect):
    _, findings = make(env={"NCCL_PROTO": proto}, facts=facts(interconnect))
    [f] = by_rule(findings, "ll128_on_pcie", "error")
    assert f.key == "env.NCCL_PROTO" and "NCCL_PROTO=LL" in f.message


def test_ll128_with_pcie_requirement_is_an_error_without_facts(make):
    _, findings = make(env={"NCCL_PROTO": "LL128"}, requires={"interconnect": "pcie"})
    assert len(by_rule(findings, "ll128_on_pcie", "error")) == 1


@pytest.mark.parametrize("proto", ["^LL128", "LL", "LL,Simple", "simple"])
def test_ll128_excluded_passes_on_pcie(make, proto):
    _, findings = make(env={"NCCL_PROTO": proto}, facts=PCIE)
    assert by_rule(findings, "ll128_on_pcie") == []


def test_ll128_on_nvlink_facts_passes(make):
    plan, findings = make(env={"NCCL_PROTO": "LL128"}, facts=NVLINK)
    assert by_rule(findings, "ll128_on_pcie") == []
    assert "conditions" not in plan.requires


def test_ll128_host_facts_win_over_the_profile_requirement(make):
    _, findings = make(env={"NCCL_PROTO": "LL128"}, requires={"interconnect": "pcie"}, facts=NVLINK)
    assert by_rule(findings, "ll128_on_pcie") == []


def test_ll128_without_facts_or_requirement_becomes_a_plan_condition(make):
    plan, findings = make(env={"NCCL_PROTO": "LL128"})
    [f] = by_rule(findings, "ll128_on_pcie")
    assert f.level == "requires"
    assert plan.requires["conditions"] == [f.message]
    assert "NVLink" in f.message
    build_plan("t", "off", environ=ENV)  # a condition does not block


def test_bug_per_collective_ll128_is_missed_on_pcie(make):
    """NCCL_PROTO="LL;allreduce:LL128" lets all-reduce use LL128 (NCCL's per-collective syntax)."""
    _, findings = make(env={"NCCL_PROTO": "LL;allreduce:LL128"}, facts=PCIE)
    assert len(by_rule(findings, "ll128_on_pcie", "error")) == 1


# ---- NCCL_PROTO without Simple ------------------------------------------------------------------


@pytest.mark.parametrize("proto", ["LL", "ll", "LL,LL128", "^Simple", "allreduce:LL"])
def test_proto_without_simple_warns_about_prefill(make, proto):
    plan, findings = make(env={"NCCL_PROTO": proto})
    [f] = by_rule(findings, "nccl_proto_without_simple", "warning")
    assert f.key == "env.NCCL_PROTO" and "prefill" in f.message and f.message in plan.warnings


def test_buffsize_with_ll_only_is_a_no_op_warning(make):
    _, findings = make(env={"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": 1048576})
    found = by_rule(findings, "nccl_proto_without_simple", "warning")
    assert [f.key for f in found] == ["env.NCCL_PROTO", "env.NCCL_BUFFSIZE"]
    assert "does nothing" in found[1].message


@pytest.mark.parametrize(
    "env", [{"NCCL_PROTO": "LL,Simple", "NCCL_BUFFSIZE": 1048576}, {"NCCL_PROTO": "^LL128"}, {"NCCL_BUFFSIZE": 1048576}]
)
def test_proto_with_simple_passes(make, env):
    _, findings = make(env=env)
    assert by_rule(findings, "nccl_proto_without_simple") == []


def test_nccl_tuned_warns_about_prefill_but_sets_no_dead_buffsize():
    _, findings = evaluate("nccl-tuned", "eagle3", PCIE, environ=ENV)
    assert [f.key for f in by_rule(findings, "nccl_proto_without_simple")] == ["env.NCCL_PROTO"]


# ---- (i) misspelt NCCL variables ----------------------------------------------------------------


def test_misspelt_nccl_variable_suggests_the_real_name(make):
    plan, findings = make(env={"NCCL_MAX_NCHANNEL": 4})
    [f] = by_rule(findings, "unknown_nccl_env", "warning")
    assert f.key == "env.NCCL_MAX_NCHANNEL"
    assert "did you mean NCCL_MAX_NCHANNELS?" in f.message
    assert f.message in plan.warnings


def test_unknown_nccl_variable_without_close_match(make):
    _, findings = make(env={"NCCL_ZZZZZZZZZZZZZZZ": 1})
    [f] = by_rule(findings, "unknown_nccl_env", "warning")
    assert "NCCL ignores unknown variables" in f.message


def test_known_nccl_variables_pass(make):
    names = {
        "NCCL_PROTO": "LL",
        "NCCL_MAX_NCHANNELS": 4,
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_DEBUG": "INFO",
        "OTHER": 1,
    }
    _, findings = make(env=names)
    assert by_rule(findings, "unknown_nccl_env") == []
