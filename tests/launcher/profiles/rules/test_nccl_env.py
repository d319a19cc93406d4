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


@pytest.mark.parametrize(
    ("typo", "real"),
    [("NCCL_MAX_NCHANELS", "NCCL_MAX_NCHANNELS"), ("NCCL_MAX_NCHANNEL", "NCCL_MAX_NCHANNELS"),
     ("NCCL_PORTO", "NCCL_PROTO"), ("NCCL_GRAPH_MIXING_SUPORT", "NCCL_GRAPH_MIXING_SUPPORT")],
)
def test_misspelt_nccl_variable_is_an_error_with_the_real_name(make, typo, real):
    _, findings = make(env={typo: 4})
    [f] = by_rule(findings, "unknown_nccl_env", "error")
    assert f.key == f"env.{typo}" and f.file == make.path
    assert f"did you mean {real}?" in f.message
    with pytest.raises(UserError, match=f"did you mean {real}"):
        build_plan("t", "off", environ=ENV)


def test_misspelt_nccl_variable_fails_check(tmp_path, monkeypatch):
    from launcher.cli import main

    root = tmp_path / "user"
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
    (root).mkdir()
    (root / "t.toml").write_text('description = "t"\n[env]\nNCCL_MAX_NCHANELS = 4\n')
    assert main(["check", "t", "--spec", "off"]) == 2


def test_unknown_nccl_variable_without_close_match(make):
    plan, findings = make(env={"NCCL_ZZZZZZZZZZZZZZZ": 1})
    [f] = by_rule(findings, "unknown_nccl_env", "warning")
    assert "ignores unknown variables" in f.message and f.message in plan.warnings


def test_removed_nccl_variable_is_a_warning(make):
    _, findings = make(env={"NCCL_LL_THRESHOLD": 0})
    [f] = by_rule(findings, "unknown_nccl_env", "warning")
    assert "no longer read" in f.message


def test_known_names_cover_the_pinned_nccl():
    from launcher.profiles.nccl_names import KNOWN_NCCL_ENV

    # 2.30's capture-time stream ordering (src/enqueue.cc:1539), 2.28's graph mixing (strongstream.cc:157),
    # names read through helpers rather than NCCL_PARAM (paths.cc ncclGetLevel, debug.cc)
    for name in ("NCCL_GRAPH_STREAM_ORDERING", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_P2P_LEVEL", "NCCL_DEBUG",
                 "NCCL_NET_GDR_LEVEL", "NCCL_WIN_ENABLE", "NCCL_SYM_KERNEL", "NCCL_NVLS_ENABLE"):
        assert name in KNOWN_NCCL_ENV
    # names that were listed but no NCCL 2.28-2.31 reads: they would hide typos of real ones
    for name in ("NCCL_SYM_KERNEL_ENABLE", "NCCL_WORK_FIFO_DEPTH", "NCCL_ALGO_PROTO", "NCCL_NVLS_TREE_CHANNELS"):
        assert name not in KNOWN_NCCL_ENV


def test_known_nccl_variables_pass(make):
    names = {
        "NCCL_PROTO": "LL",
        "NCCL_MAX_NCHANNELS": 4,
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_DEBUG": "INFO",
        "NCCL_GRAPH_STREAM_ORDERING": 1,
        "NCCL_ASYNC_ERROR_HANDLING": 1,
        "OTHER": 1,
    }
    _, findings = make(env=names)
    assert by_rule(findings, "unknown_nccl_env") == []


# ---- NCCL_P2P_LEVEL across CPU sockets ----------------------------------------------------------


def _dual_socket():
    f = facts("pcie-cross-socket", "12.0")
    f.numa_nodes = [[0, 1, 2, 3], [4, 5, 6, 7]]
    return f


def test_p2p_level_sys_on_a_dual_socket_host_warns():
    plan, findings = evaluate("nccl-tuned", "eagle3", _dual_socket(), environ=ENV)
    [f] = by_rule(findings, "p2p_level_across_sockets", "warning")
    assert f.key == "env.NCCL_P2P_LEVEL" and "GPU0 and GPU4" in f.message and "KIT_NCCL_P2P_LEVEL=PHB" in f.message
    assert f.message in plan.warnings


@pytest.mark.parametrize("level", ["PHB", "PXB", "3"])
def test_p2p_level_within_a_socket_passes(level):
    env = {**ENV, "KIT_NCCL_P2P_LEVEL": level}
    _, findings = evaluate("nccl-tuned", "eagle3", _dual_socket(), environ=env)
    assert by_rule(findings, "p2p_level_across_sockets") == []


def test_p2p_level_sys_on_a_switch_host_passes():
    _, findings = evaluate("nccl-tuned", "eagle3", PCIE, environ=ENV)
    assert by_rule(findings, "p2p_level_across_sockets") == []


def test_p2p_level_sys_without_host_facts_is_a_condition():
    plan, findings = evaluate("nccl-tuned", "eagle3", None, environ=ENV)
    [f] = by_rule(findings, "p2p_level_across_sockets", "requires")
    assert f.message in plan.requires["conditions"]


def test_doctor_reports_the_dual_socket_fixture_as_cross_socket():
    from pathlib import Path

    from launcher.doctor import topo

    text = (Path(__file__).resolve().parents[3] / "fixtures/doctor/pcie8_dual_socket_topo.txt").read_text()
    t = topo.parse(text)
    assert topo.classify(t) == "pcie-cross-socket"
    assert topo.numa_split(t) == [[0, 1, 2, 3], [4, 5, 6, 7]]


# ---- NCCL_GRAPH_MIXING_SUPPORT=0 with eager pynccl ----------------------------------------------

MIX0 = {"NCCL_GRAPH_MIXING_SUPPORT": 0}


@pytest.mark.parametrize(
    ("server", "word"),
    [({"attn-dp-size": 8}, "DP attention"), ({"enable-dp-attention": True}, "DP attention"),
     ({"enable-pdmux": True}, "pdmux"), ({"enable-symm-mem": True}, "symm-mem")],
)
def test_graph_mixing_off_with_eager_pynccl_is_an_error(make, server, word):
    _, findings = make(env=MIX0, server=server)
    [f] = by_rule(findings, "graph_mixing_off_with_eager_nccl", "error")
    assert f.key == "env.NCCL_GRAPH_MIXING_SUPPORT" and word in f.message


def test_graph_mixing_off_under_dcp_is_redundant(make):
    _, findings = make(env=MIX0, server={"dcp-size": 2})
    [f] = by_rule(findings, "graph_mixing_off_with_eager_nccl", "warning")
    assert "engine.py:1916-1920" in f.message


def test_graph_mixing_profile_passes_on_plain_tp():
    plan, findings = evaluate("nccl-graph-mixing-off", "eagle3", PCIE, environ=ENV)
    assert plan.env["NCCL_GRAPH_MIXING_SUPPORT"] == "0" and plan.status == "experimental"
    assert by_rule(findings, "graph_mixing_off_with_eager_nccl") == []
    assert by_rule(findings, "unknown_nccl_env") == []


def test_graph_mixing_is_a_parent_set_variable():
    from launcher.profiles.rules import PARENT_SET_ENV

    assert "NCCL_GRAPH_MIXING_SUPPORT" in PARENT_SET_ENV


# ---- nccl-tuned and nccl-tuned-simple -----------------------------------------------------------


def test_nccl_tuned_leaves_cumem_to_sglang():
    plan = build_plan("nccl-tuned", "eagle3", PCIE, environ=ENV)
    assert "NCCL_CUMEM_ENABLE" not in plan.env


def test_nccl_tuned_simple_gives_prefill_simple_back():
    plan, findings = evaluate("nccl-tuned-simple", "eagle3", PCIE, environ=ENV)
    assert plan.env["NCCL_PROTO"] == "LL,Simple" and plan.env["NCCL_ALGO"] == "Ring"
    assert by_rule(findings, "nccl_proto_without_simple") == []
