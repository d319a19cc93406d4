"""launcher.profiles.rules: each validation rule, a case that passes and one that fails, with its level and message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers_profiles import BUILTIN, ENV, clean_env, facts, profile_toml, write_profiles

from launcher.errors import UserError
from launcher.profiles import rules, sglang_args
from launcher.profiles.plan import build_plan, evaluate


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


@pytest.fixture(scope="session")
def sglang_parser():
    """SGLang's parser takes seconds to build; sglang_args caches it, so build it once per session."""
    return sglang_args.parser()


@pytest.fixture
def make(tmp_path, monkeypatch):
    """Write one user profile `t` (plus optional extra files) and return a function that evaluates it."""
    root = tmp_path / "user"
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))

    def _make(*, facts=None, spec="off", use_parser=False, extra=None, **table):
        write_profiles(root, {"t.toml": profile_toml("t", **table), **(extra or {})})
        return evaluate("t", spec, facts, environ=ENV, use_parser=use_parser)

    _make.path = root / "t.toml"
    return _make


def by_rule(findings, name: str, level: str | None = None) -> list[rules.Finding]:
    return [f for f in findings if f.rule == name and (level is None or f.level == level)]


PCIE = facts("pcie-switch", "12.0")
NVLINK = facts("nvlink", "9.0")


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


# ---- (c) CUDA_DEVICE_MAX_CONNECTIONS ------------------------------------------------------------


def test_cuda_device_max_connections_warns_that_it_wins_in_every_worker(make):
    plan, findings = make(env={"CUDA_DEVICE_MAX_CONNECTIONS": 1})
    [f] = by_rule(findings, "cuda_device_max_connections", "warning")
    assert f.message in plan.warnings
    # true to what happens (tests/test_sitecustomize.py runs it): the profile's 1 replaces SGLang's 8
    assert f.message.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 replaces the 8 SGLang sets")
    assert "every TP worker" in f.message


@pytest.mark.parametrize("env", [{"NCCL_PROTO": "LL,Simple"}, {"CUDA_DEVICE_MAX_CONNECTIONS": 8}])
def test_no_cuda_device_max_connections_no_warning(make, env):
    plan, findings = make(env=env)
    assert by_rule(findings, "cuda_device_max_connections") == []
    assert plan.warnings == []


# ---- variables SGLang sets in its parent ---------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "server", "key"),
    [
        ({"NCCL_CUMEM_ENABLE": 0}, {"enable-symm-mem": True}, "env.NCCL_CUMEM_ENABLE"),
        ({"NCCL_NVLS_ENABLE": 0}, {"enable-nccl-nvls": True}, "env.NCCL_NVLS_ENABLE"),
        ({"NCCL_NVLS_ENABLE": "0"}, {"enable-symm-mem": True}, "env.NCCL_NVLS_ENABLE"),
    ],
)
def test_a_profile_value_that_undoes_a_flags_need_is_an_error(make, env, server, key):
    _, findings = make(env=env, server=server)
    [f] = by_rule(findings, "parent_set_env_conflict", "error")
    assert f.key == key and "every TP worker" in f.message and "engine.py" in f.message


@pytest.mark.parametrize(
    ("env", "server"),
    [({"NCCL_CUMEM_ENABLE": 0}, {}), ({"NCCL_CUMEM_ENABLE": 1}, {"enable-symm-mem": True}), ({}, {"enable-nccl-nvls": True})],
)
def test_parent_set_values_without_a_conflict_pass(make, env, server):
    _, findings = make(env=env, server=server)
    assert by_rule(findings, "parent_set_env_conflict") == []


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


# ---- (d) expandable segments + PCIe IPC all-reduce ----------------------------------------------


@pytest.mark.parametrize(
    "conf", ["expandable_segments:True", "max_split_size_mb:128, expandable_segments:true"]
)
def test_expandable_segments_with_pcie_ipc_is_an_error(make, conf):
    _, findings = make(env={"PYTORCH_CUDA_ALLOC_CONF": conf, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1})
    [f] = by_rule(findings, "expandable_segments_with_pcie_ipc", "error")
    assert f.key == "env.PYTORCH_CUDA_ALLOC_CONF"
    assert "PYTORCH_CUDA_ALLOC_CONF = false" in f.message


@pytest.mark.parametrize(
    "env",
    [
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1},
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1},
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 0},
    ],
)
def test_expandable_segments_rule_passes(make, env):
    _, findings = make(env=env)
    assert by_rule(findings, "expandable_segments_with_pcie_ipc") == []


def test_expandable_segments_in_a_custom_ar_child(make):
    _, findings = make(extends="custom-ar", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert len(by_rule(findings, "expandable_segments_with_pcie_ipc", "error")) == 1
    _, findings = make(
        extends="custom-ar",
        env={
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": False,
        },
    )
    assert by_rule(findings, "expandable_segments_with_pcie_ipc") == []


# ---- (e) SGLang's real parser -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "key", "expect"),
    [
        ({"tp": 8}, "server.tp", "--tp-size"),
        ({"tensor-parallel-size": 8}, "server.tensor-parallel-size", "alias; write --tp-size"),
        ({"disable-cuda-graph": True}, "server.disable-cuda-graph", "deprecated"),
        ({"cuda-graph-max-bs": 8}, "server.cuda-graph-max-bs", "ambiguous"),
        ({"no-such-flag-anywhere": 1}, "server.no-such-flag-anywhere", "has no flag --no-such-flag-anywhere"),
        ({"deepep-mode": "fast"}, "server.deepep-mode", "invalid choice: 'fast'"),
    ],
)
def test_sglang_parser_rule_rejects(make, sglang_parser, server, key, expect):
    _, findings = make(server=server, use_parser=True)
    errors = by_rule(findings, "sglang_flags", "error")
    assert len(errors) == 1
    assert errors[0].key == key and expect in errors[0].message
    assert errors[0].file == (make.path if key != "server" else None)


def test_bug_deprecated_fusion_flag_is_not_reported(make, sglang_parser):
    """SGLang 0.5.23's help says "(Deprecated: use --flashinfer-allreduce-fusion-backend=auto)"."""
    _, findings = make(server={"enable-flashinfer-allreduce-fusion": True}, use_parser=True)
    errors = by_rule(findings, "sglang_flags", "error")
    assert len(errors) == 1 and "deprecated" in errors[0].message


def test_sglang_parser_rule_is_skipped_without_parser(make):
    _, findings = make(server={"tp": 8})
    assert by_rule(findings, "sglang_flags") == []


@pytest.mark.parametrize("spec", sorted(p.stem for p in (BUILTIN / "spec").glob("*.toml")))
def test_real_profiles_pass_the_real_parser(sglang_parser, spec):
    for name in sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base"):
        _, findings = evaluate(name, spec, environ=ENV, use_parser=True)
        assert by_rule(findings, "sglang_flags") == [], name
        assert [f for f in findings if f.level == "error"] == [], name


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


# ---- PCIe-IPC fallback conditions ---------------------------------------------------------------

IPC = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1}


@pytest.mark.parametrize(("server", "key"), [({"tp-size": 3}, "server.tp-size"), ({"tp-size": "16"}, "server.tp-size"),
                                            ({"dtype": "float16"}, "server.dtype"), ({"dtype": "half"}, "server.dtype")])
def test_pcie_ipc_outside_its_world_sizes_or_dtype_is_an_error(make, server, key):
    _, findings = make(env=IPC, server=server)
    [f] = by_rule(findings, "pcie_ipc_fallback", "error")
    assert f.key == key and "stays on NCCL" in f.message and "pcie_ipc_ar.py" in f.message


def test_pcie_ipc_under_deterministic_inference_is_an_error(make):
    _, findings = make(env=IPC, server={"enable-deterministic-inference": True, "dtype": "bfloat16"})
    [f] = by_rule(findings, "pcie_ipc_fallback", "error")
    assert "deterministic" in f.message


def test_pcie_ipc_with_dtype_auto_requires_a_bf16_model(make):
    plan, findings = make(env=IPC)
    assert [f.level for f in by_rule(findings, "pcie_ipc_fallback")] == ["requires"]
    assert any("bf16" in c for c in plan.requires["conditions"])


@pytest.mark.parametrize(("env", "server"), [(IPC, {"dtype": "bfloat16", "tp-size": 4}), ({}, {"dtype": "float16", "tp-size": 3})])
def test_pcie_ipc_rule_passes(make, env, server):
    _, findings = make(env=env, server=server)
    assert by_rule(findings, "pcie_ipc_fallback") == []


# ---- fusion over PCIe at TP > 2 -----------------------------------------------------------------

FUSION = {"flashinfer-allreduce-fusion-backend": "trtllm", "enforce-disable-flashinfer-allreduce-fusion": False}


def test_fusion_over_pcie_at_tp8_warns_with_the_upstream_evidence(make):
    plan, findings = make(server=FUSION, facts=PCIE, requires={"patches": ["sm120-allreduce-fusion"]})
    [f] = by_rule(findings, "fusion_over_pcie", "warning")
    assert "sglang#32330" in f.message and "vllm#48075" in f.message and f.message in plan.warnings


@pytest.mark.parametrize(("host", "tp"), [(PCIE, 2), (NVLINK, 8), (None, 8)])
def test_fusion_at_tp2_on_nvlink_or_unknown_host_passes(make, host, tp):
    _, findings = make(server={**FUSION, "tp-size": tp}, facts=host, requires={"patches": ["sm120-allreduce-fusion"]})
    assert by_rule(findings, "fusion_over_pcie") == []


# ---- (g) torch symm-mem -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "needle"), [(facts("nvlink", "12.0"), "SM 12.0"), (facts("pcie-switch", "9.0"), "PCIe-only")]
)
def test_symm_mem_ineligible(host, needle):
    _, findings = evaluate("symm-mem", "eagle3", host, environ=ENV)
    found = by_rule(findings, "symm_mem_eligibility", "ineligible")
    assert len(found) == 1 and needle in found[0].message
    assert found[0].key == "server.enable-torch-symm-mem"


def test_symm_mem_on_sm120_pcie_gives_both_reasons():
    _, findings = evaluate("symm-mem", "eagle3", PCIE, environ=ENV)
    assert len(by_rule(findings, "symm_mem_eligibility", "ineligible")) == 2


def test_symm_mem_on_sm90_nvlink_passes():
    plan = build_plan("symm-mem", "eagle3", NVLINK, environ=ENV)
    _, findings = evaluate("symm-mem", "eagle3", NVLINK, environ=ENV)
    assert by_rule(findings, "symm_mem_eligibility") == []
    assert "--enable-torch-symm-mem" in plan.flags


def test_symm_mem_without_facts_is_a_condition():
    plan, findings = evaluate("symm-mem", "eagle3", environ=ENV)
    assert [f.level for f in by_rule(findings, "symm_mem_eligibility")] == ["requires"]
    assert any("multicast" in c for c in plan.requires["conditions"])


# ---- (h) FlashInfer fusion on SM120 needs the patch ---------------------------------------------

FUSION = {"flashinfer-allreduce-fusion-backend": "trtllm"}


def test_fusion_on_sm120_requirement_without_patch_is_an_error(make):
    _, findings = make(server=FUSION, requires={"sm": ["12.0"]})
    [f] = by_rule(findings, "fusion_needs_sm120_patch", "error")
    assert 'patches = ["sm120-allreduce-fusion"]' in f.message


def test_fusion_on_sm120_facts_without_patch_is_an_error(make):
    _, findings = make(server={"enable-flashinfer-allreduce-fusion": True}, facts=PCIE)
    assert len(by_rule(findings, "fusion_needs_sm120_patch", "error")) == 1


def test_fusion_with_patch_passes_on_sm120(make):
    _, findings = make(
        server=FUSION, requires={"sm": ["12.0"], "patches": ["sm120-allreduce-fusion"]}, facts=PCIE
    )
    assert by_rule(findings, "fusion_needs_sm120_patch") == []


def test_fusion_on_sm90_passes_without_patch(make):
    _, findings = make(server=FUSION, facts=NVLINK)
    assert by_rule(findings, "fusion_needs_sm120_patch") == []


def test_fusion_without_sm_information_is_a_condition(make):
    plan, findings = make(server=FUSION)
    assert [f.level for f in by_rule(findings, "fusion_needs_sm120_patch")] == ["requires"]
    assert any("sm120-allreduce-fusion" in c for c in plan.requires["conditions"])


def test_fused_profile_passes_on_sm120_and_a_child_dropping_the_patch_fails(make):
    build_plan("fused", "eagle3", facts("pcie-switch", "12.0", p2p_ok=True), environ=ENV)
    _, findings = make(extends="fused", requires={"patches": []}, facts=PCIE)
    assert len(by_rule(findings, "fusion_needs_sm120_patch", "error")) == 1


# ---- fusion needs the enforce-disable flag that base.toml sets to be unset --------------------


def test_fusion_backend_beside_the_enforce_flag_is_an_error(make):
    _, findings = make(server=FUSION)  # base.toml sets enforce-disable-flashinfer-allreduce-fusion
    [f] = by_rule(findings, "fusion_disabled_by_enforce", "error")
    assert f.key == "server.flashinfer-allreduce-fusion-backend"
    assert "enforce-disable-flashinfer-allreduce-fusion = false" in f.message


def test_fusion_backend_with_the_enforce_flag_unset_passes(make):
    _, findings = make(server={**FUSION, "enforce-disable-flashinfer-allreduce-fusion": False})
    assert by_rule(findings, "fusion_disabled_by_enforce") == []
    plan, findings = evaluate("fused", "eagle3", environ=ENV)
    assert by_rule(findings, "fusion_disabled_by_enforce") == []
    assert "--enforce-disable-flashinfer-allreduce-fusion" not in plan.flags


# ---- parallel sizes against the GPU count -------------------------------------------------------


def test_more_ranks_than_gpus_is_ineligible():
    _, findings = evaluate("ep", "off", facts("pcie-switch", "12.0", n=4), environ=ENV)
    found = by_rule(findings, "gpu_count", "ineligible")
    assert sorted(f.key for f in found) == ["server.ep-size", "server.tp-size"]
    assert all("KIT_TP_SIZE=4" in f.message for f in found)


def test_ranks_that_fit_pass():
    _, findings = evaluate(
        "ep", "off", facts("pcie-switch", "12.0", n=4), environ={**ENV, "KIT_TP_SIZE": "4"}
    )
    assert by_rule(findings, "gpu_count") == []
    _, findings = evaluate("ep", "off", facts("pcie-switch", "12.0", n=8), environ=ENV)
    assert by_rule(findings, "gpu_count") == []
    _, findings = evaluate("ep", "off", facts("pcie-switch"), environ=ENV)  # GPU count unknown
    assert by_rule(findings, "gpu_count") == []


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


# ---- speculation belongs to the spec overlay ----------------------------------------------------


def test_speculation_in_profile_warns(make):
    plan, findings = make(server={"speculative-num-steps": 5}, spec="off")
    [f] = by_rule(findings, "speculation_in_profile", "warning")
    assert f.key == "server.speculative-num-steps" and "--spec" in f.message
    assert f.message in plan.warnings


def test_speculation_from_the_overlay_does_not_warn(make):
    _, findings = make(server={"mem-fraction-static": 0.8}, spec="eagle3")
    assert by_rule(findings, "speculation_in_profile") == []


# ---- host requirements --------------------------------------------------------------------------


def test_p2p_requirement_names_the_bad_gpu_pair(make):
    _, findings = make(
        requires={"p2p": True}, facts=facts("pcie-switch", "12.0", p2p_ok=False, bad_pairs=[(2, 5)])
    )
    [f] = by_rule(findings, "host_requirements", "ineligible")
    assert f.key == "requires.p2p" and "GPU2 and GPU5" in f.message


def test_p2p_requirement_passes_when_p2p_is_ok(make):
    _, findings = make(requires={"p2p": True}, facts=facts("pcie-switch", "12.0", p2p_ok=True))
    assert by_rule(findings, "host_requirements") == []


@pytest.mark.parametrize(
    ("requires", "host", "key"),
    [
        ({"sm": ["9.0"]}, facts("nvlink", "12.0"), "requires.sm"),
        ({"interconnect": "nvlink"}, facts("pcie-hostbridge", "9.0"), "requires.interconnect"),
        ({"interconnect": "pcie"}, facts("nvlink", "9.0"), "requires.interconnect"),
        (
            {"nvlink_multicast": True},
            facts("nvlink", "9.0", nvlink_multicast=False),
            "requires.nvlink_multicast",
        ),
    ],
)
def test_other_host_requirements(make, requires, host, key):
    _, findings = make(requires=requires, facts=host)
    [f] = by_rule(findings, "host_requirements", "ineligible")
    assert f.key == key
    _, findings = make(requires=requires)  # without facts nothing is judged
    assert by_rule(findings, "host_requirements") == []


def test_builtin_profiles_on_the_target_host():
    """8x SM120 over PCIe with working P2P: everything but symm-mem is eligible."""
    host = facts("pcie-cross-socket", "12.0", p2p_ok=True)
    blocked = set()
    for name in sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base"):
        _, findings = evaluate(name, "eagle3", host, environ=ENV)
        if any(f.level in ("error", "ineligible") for f in findings):
            blocked.add(name)
    assert blocked == {"symm-mem"}


def test_finding_render_names_file_and_key():
    f = rules.Finding("error", "r", "env.X", "fix it", Path("/p/x.toml"))
    assert f.render() == "/p/x.toml: key 'env.X': fix it"
    assert rules.Finding("error", "r", "env.X", "fix it").render() == "key 'env.X': fix it"
    assert rules.Finding("error", "r", "", "fix it").render() == "fix it"


def test_every_registered_rule_is_tested():
    """A new rule in launcher/profiles/rules.py needs its own cases in this file."""
    tested = set(re.findall(r'by_rule\(\s*findings,\s*"(\w+)"', Path(__file__).read_text()))
    assert {fn.__name__ for fn, _ in rules.RULES} <= tested
