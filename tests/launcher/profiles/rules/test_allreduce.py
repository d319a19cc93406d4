"""launcher.profiles.rules.allreduce: PCIe-IPC (expandable segments, silent fallbacks to NCCL),
trtllm fusion (over PCIe, the SM120 patch, the enforce flag) and torch symm-mem; a passing and a
failing case each, with level and message."""

from __future__ import annotations

import json

import helpers_rules
import pytest
from helpers_profiles import ENV, facts, profile_toml
from helpers_rules import NVLINK, PCIE, by_rule

from launcher.errors import UserError
from launcher.profiles.plan import build_plan, evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


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
    # nccl-tuned's NCCL values would undo deterministic inference in the workers (deterministic_env_conflict)
    assert "or use nccl-tuned" not in f.message and "not nccl-tuned" in f.message


def test_custom_ar_under_deterministic_inference_is_refused_by_both_rules(make):
    """custom-ar extends nccl-tuned: the PCIe-IPC fallback and the inherited NCCL values are both named."""
    _, findings = make(extends="custom-ar", server={"enable-deterministic-inference": True, "dtype": "bfloat16"})
    assert {f.rule for f in findings if f.level == "error"} == {"pcie_ipc_fallback", "deterministic_env_conflict"}


def test_pcie_ipc_with_dtype_auto_requires_a_bf16_model(make):
    plan, findings = make(env=IPC)
    assert [f.level for f in by_rule(findings, "pcie_ipc_fallback")] == ["requires"]
    assert any("bf16" in c for c in plan.requires["conditions"])


@pytest.mark.parametrize(("env", "server"), [(IPC, {"dtype": "bfloat16", "tp-size": 4}), ({}, {"dtype": "float16", "tp-size": 3})])
def test_pcie_ipc_rule_passes(make, env, server):
    _, findings = make(env=env, server=server)
    assert by_rule(findings, "pcie_ipc_fallback") == []


# ---- fusion over PCIe at TP > 2 -----------------------------------------------------------------

TRTLLM_FUSION = {"flashinfer-allreduce-fusion-backend": "trtllm", "enforce-disable-flashinfer-allreduce-fusion": False}


def test_fusion_over_pcie_at_tp8_warns_with_the_upstream_evidence(make):
    plan, findings = make(server=TRTLLM_FUSION, facts=PCIE, requires={"patches": ["sm120-allreduce-fusion"]})
    [f] = by_rule(findings, "fusion_over_pcie", "warning")
    assert "sglang#32330" in f.message and "vllm#48075" in f.message and f.message in plan.warnings


@pytest.mark.parametrize(("host", "tp"), [(PCIE, 2), (NVLINK, 8), (None, 8)])
def test_fusion_at_tp2_on_nvlink_or_unknown_host_passes(make, host, tp):
    _, findings = make(server={**TRTLLM_FUSION, "tp-size": tp}, facts=host, requires={"patches": ["sm120-allreduce-fusion"]})
    # an unknown host gets no warning, only the condition (test_fused_without_host_facts_lists_the_pcie_risk)
    assert [f.level for f in by_rule(findings, "fusion_over_pcie")] == ([] if host else ["requires"])


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


# ---- PCIe-IPC workspace wide enough for prefill -------------------------------------------------

EAGLE = {"speculative-algorithm": "EAGLE3", "speculative-num-draft-tokens": 4}


def test_pcie_ipc_under_speculation_sizes_for_sglangs_48_requests(make):
    """EAGLE/NGRAM reset max running requests to 48 (speculative_hook.py:1086-1094, 1293-1302), and the
    captured batches are clamped to that pool: 48 x 4 = 192 rows, decode-sized, no warning."""
    for algo in ("EAGLE3", "NGRAM"):
        _, findings = make(env=IPC, server={"dtype": "bfloat16", **EAGLE, "speculative-algorithm": algo})
        assert by_rule(findings, "pcie_ipc_prefill_rows") == []


def test_pcie_ipc_with_an_explicit_wide_request_pool_takes_prefill(make):
    plan, findings = make(env=IPC, server={"dtype": "bfloat16", **EAGLE, "max-running-requests": 256})
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "256 requests" in f.message and "--max-running-requests" in f.message and "1024 rows" in f.message
    assert "+66%" in f.message and "level with NCCL" in f.message
    assert "to 128 or less" in f.message and f.message in plan.warnings


def test_pcie_ipc_graph_batch_wider_than_the_pool_is_clamped_to_the_pool(make):
    # an explicit graph max of 512 under EAGLE-3 still captures at most the 48-request pool
    _, findings = make(env=IPC, server={"dtype": "bfloat16", **EAGLE, "cuda-graph-max-bs-decode": 512})
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []
    plan, findings = make(env=IPC, server={"dtype": "bfloat16", **EAGLE, "cuda-graph-max-bs-decode": 512,
                                           "max-running-requests": 512})
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "512 requests (--cuda-graph-max-bs-decode) x 4 tokens a request (--speculative-num-draft-tokens) = 2048 rows" in f.message


def test_pcie_ipc_ngram_without_draft_tokens_verifies_12_a_request(make):
    """NGRAM without --speculative-num-draft-tokens takes 12 (speculative_hook.py:1314-1322): 48 x 12 = 576 rows."""
    plan, findings = make(env=IPC, server={"dtype": "bfloat16", "speculative-algorithm": "NGRAM"})
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "48 requests" in f.message and "x 12 tokens a request" in f.message and "576 rows" in f.message
    assert "speculative_hook.py:1314-1322" in f.message and "to 42 or less" in f.message
    # the kit's ngram overlay sets 4: 192 rows, no warning
    _, findings = make(env=IPC, server={"dtype": "bfloat16", "speculative-algorithm": "NGRAM",
                                        "speculative-num-draft-tokens": 4})
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []


def test_pcie_ipc_eagle_top_k_1_verifies_steps_plus_one(make):
    """At top-k 1 SGLang sets draft tokens to steps + 1 whatever was given (speculative_hook.py:1255-1266)."""
    server = {"dtype": "bfloat16", "speculative-algorithm": "EAGLE3", "speculative-num-steps": 7,
              "speculative-eagle-topk": 1, "max-running-requests": 100}
    _, findings = make(env=IPC, server=server)
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "100 requests (the request pool of --max-running-requests" in f.message
    assert "x 8 tokens a request (steps + 1 at top-k 1" in f.message
    assert "800 rows" in f.message
    # top-k > 1: the given draft tokens count
    _, findings = make(env=IPC, server={**server, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 4})
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []
    # no steps: SGLang's auto-pick, 4 draft tokens for the kit's (non-Llama) targets
    _, findings = make(env=IPC, server={"dtype": "bfloat16", "speculative-algorithm": "EAGLE3",
                                        "max-running-requests": 200})
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "x 4 tokens a request (SGLang's auto-picked draft tokens" in f.message and "800 rows" in f.message


def test_pcie_ipc_without_speculation_and_a_wide_graph_warns(make):
    _, findings = make(env=IPC, server={"dtype": "bfloat16", "cuda-graph-max-bs-decode": 1024})
    [f] = by_rule(findings, "pcie_ipc_prefill_rows", "warning")
    assert "1024 rows" in f.message and "to 512 or less" in f.message


@pytest.mark.parametrize(
    "server",
    [{"cuda-graph-max-bs-decode": 64, **EAGLE}, {"cuda-graph-max-bs-decode": 128, **EAGLE}, {},
     {"max-running-requests": 32, **EAGLE}, {"cuda-graph-config": '{"decode": {"max_bs": 16}}', **EAGLE},
     {"max-running-requests": 128, **EAGLE}, {"max-running-requests": 4096}],
)
def test_pcie_ipc_decode_sized_workspace_passes(make, server):
    _, findings = make(env=IPC, server={"dtype": "bfloat16", **server})
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []


def test_pcie_ipc_fixed_numel_is_left_alone(make):
    _, findings = make(env={**IPC, "SGLANG_PCIE_IPC_MAX_NUMEL": 917504}, server={**EAGLE, "max-running-requests": 512})
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []


@pytest.mark.parametrize("spec", ["eagle3", "ngram", "off"])
def test_custom_ar_leaves_the_decode_graphs_alone_and_stays_decode_sized(spec):
    """No --cuda-graph-max-bs-decode cap: it did nothing under speculation (48-request pool) and, without
    it, only took CUDA graphs from decode batches above 64 requests."""
    plan, findings = evaluate("custom-ar", spec, PCIE, environ=ENV)
    assert "--cuda-graph-max-bs-decode" not in plan.flags
    assert by_rule(findings, "pcie_ipc_prefill_rows") == []


def test_custom_ar_flag_is_the_full_name(sglang_parser):
    from launcher.profiles import sglang_args

    assert sglang_args.flag_problems(["--model-path", "/m", "--cuda-graph-max-bs-decode", "64"]) == []
    [(flag, msg)] = sglang_args.flag_problems(["--cuda-graph-max-bs", "64"])
    assert "ambiguous" in msg


# ---- fusion over PCIe before the host is known --------------------------------------------------


def test_fused_without_host_facts_lists_the_pcie_risk():
    plan, findings = evaluate("fused", "eagle3", None, environ=ENV)
    [f] = by_rule(findings, "fusion_over_pcie", "requires")
    assert "sglang#32330" in f.message and f.message in plan.requires["conditions"]


def test_fused_with_pcie_facts_warns_and_lists_no_condition():
    plan, findings = evaluate("fused", "eagle3", PCIE, environ=ENV)
    assert [f.level for f in by_rule(findings, "fusion_over_pcie")] == ["warning"]


def test_fused_on_nvlink_is_silent():
    _, findings = evaluate("fused", "eagle3", NVLINK, environ=ENV)
    assert by_rule(findings, "fusion_over_pcie") == []


def test_every_interconnect_rule_is_a_condition_without_host_facts():
    """Each rule that warns or refuses on a PCIe host's facts says so under requires.conditions without them."""
    from launcher.profiles.loader import available_names

    for name in available_names():
        _, with_facts = evaluate(name, "eagle3", PCIE, environ=ENV)
        plan, without = evaluate(name, "eagle3", None, environ=ENV)
        host_rules = {f.rule for f in with_facts if f.level in ("warning", "error", "ineligible")} - {
            f.rule for f in without if f.level in ("warning", "error", "ineligible")}
        conditioned = {f.rule for f in without if f.level == "requires"}
        assert host_rules - {"host_requirements", "gpu_count"} <= conditioned, name


# ---- PCIe-IPC workspace against the widest adaptive tier ------------------------------------------------------------


def test_custom_ar_adaptive_from_a_low_start_is_an_error_naming_the_tier_and_the_fixes():
    """--spec-params 1,1,2 under eagle3-adaptive: SGLang builds the workspace for 48 requests x 2 tokens = 96 rows
    and never rebuilds it, while the overlay's tier 8 runs 3 steps on batches 8-31, the widest verifying in the graph
    captured at 32 (32 x 4 = 128 rows): those verify all-reduces would run on NCCL without a word
    (pcie_ipc_ar.py:402-403)."""
    plan, findings = evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, spec_params="1,1,2")
    [f] = by_rule(findings, "pcie_ipc_adaptive_tiers", "error")
    assert f.option == "--spec-params 1,1,2" and f.render().startswith("--spec-params 1,1,2: adaptive tier 8 ")
    for words in ("runs up to 3 steps on batches 8-31, padded to the captured batch 32:", "32 x 4 = 128 rows",
                  "96-row PCIe-IPC workspace",
                  "48 requests x 2 tokens at 1 starting step", "pcie_ipc_ar.py:253-254, 316-317",
                  "pcie_ipc_ar.py:402-403", "start from 3 steps (--spec-params 3,1,4: 48 x 4 = 192 rows)",
                  "give tier 8 at most 2 steps", "SGLANG_PCIE_IPC_MAX_NUMEL under [env] to 128 x"):
        assert words in f.message, (words, f.message)
    with pytest.raises(UserError, match="adaptive tier 8"):
        build_plan("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, spec_params="1,1,2")


def test_custom_ar_adaptive_tuned_tiers_start_from_the_widest_tier_so_the_workspace_holds_it():
    """Under PCIe-IPC, tuned tiers start from the most steps any tier runs (AdaptiveTiers.start_point(widest)):
    1:1,25:3,31:1 starts at 3 (48 x 4 = 192 rows), where starting at the lowest tier's 1 (96 rows) would leave the
    tier at 3 steps on batches 25-30 (120 rows) to NCCL. Given a low start by hand, the same tiers are refused;
    a request-pool cap is not offered: it would leave tiers above it unused."""
    plan, findings = evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, adaptive_tiers="1:1,25:3,31:1")
    assert by_rule(findings, "pcie_ipc_adaptive_tiers") == []
    assert plan.spec_params.steps == 3
    plan, _ = evaluate("baseline", "eagle3-adaptive", PCIE, environ=ENV, adaptive_tiers="1:1,25:3,31:1")
    assert plan.spec_params.steps == 1  # no PCIe-IPC: the lowest tier's step
    _, findings = evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, adaptive_tiers="1:1,25:3,31:1",
                           spec_params="1,1,2")
    [f] = by_rule(findings, "pcie_ipc_adaptive_tiers", "error")
    assert "adaptive tier 25 (the tuned tiers) runs up to 3 steps on batches 25-30:" in f.message
    assert "30 x 4 = 120 rows" in f.message and "96-row" in f.message and "give tier 25 at most 2 steps" in f.message
    assert "max-running-requests =" not in f.message
    # the top tier serves every batch up to the 48-request pool: 48 x 4 = 192 rows
    _, findings = evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, adaptive_tiers="1:1,25:3",
                           spec_params="1,1,2")
    [f] = by_rule(findings, "pcie_ipc_adaptive_tiers", "error")
    assert "batches 25-48:" in f.message and "48 x 4 = 192 rows" in f.message


@pytest.mark.parametrize("options", [{}, {"spec_params": "3,1,4"}, {"adaptive_tiers": "1:3,25:3,31:1"},
                                     {"adaptive_tiers": "1:1,25:1/0,31:0"}, {"spec_params": "7,1,8"}])
def test_custom_ar_adaptive_that_fits_passes(options):
    """The overlay's start 3 builds 48 x 4 = 192 rows, above its widest tier (tier 8: 32 x 4 = 128)."""
    _, findings = evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, **options)
    assert by_rule(findings, "pcie_ipc_adaptive_tiers") == []
    assert [f for f in findings if f.level == "error"] == []


@pytest.mark.parametrize("profile", ["baseline", "nccl-tuned", "fused", "mscclpp"])
def test_profiles_without_pcie_ipc_are_left_alone(profile):
    _, findings = evaluate(profile, "eagle3-adaptive", PCIE, environ=ENV, spec_params="1,1,2")
    assert by_rule(findings, "pcie_ipc_adaptive_tiers") == []


@pytest.mark.parametrize("env, server", [
    ({"SGLANG_PCIE_IPC_MAX_NUMEL": 917504}, {}),  # the user sized the workspace (elements, not rows)
    ({}, {"disable-cuda-graph": True}),  # no captured batches to route
    ({}, {"speculative-adaptive": False}),  # static EAGLE: one width, the one the workspace is built for
])
def test_pcie_ipc_adaptive_rule_leaves_fixed_workspaces_graphless_and_static_plans_alone(make, env, server):
    _, findings = make(extends="custom-ar", spec="eagle3-adaptive", env=env, server=server)
    assert by_rule(findings, "pcie_ipc_adaptive_tiers") == []


def test_pcie_ipc_adaptive_rule_follows_the_request_pool_and_offers_a_cap_where_one_fits(make):
    """A pool of 16 shrinks both sides (16 x 2 = 32 rows against tier 8's 16 x 4 = 64), and no cap fits the overlay's
    tiers (tier 1 runs 7 steps on batches up to 7). A user overlay whose wide tier is the top one gets the cap below
    that tier: max-running-requests 24 keeps every batch in tier 1 at 1 step."""
    make(extends="custom-ar", server={"max-running-requests": 16})
    _, findings = evaluate("t", "eagle3-adaptive", PCIE, environ=ENV, spec_params="1,1,2")
    [f] = by_rule(findings, "pcie_ipc_adaptive_tiers", "error")
    assert "batches 8-16:" in f.message and "16 x 4 = 64 rows" in f.message and "32-row" in f.message
    assert "max-running-requests =" not in f.message
    overlay = profile_toml("adaptive, user tiers", server={
        "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/d", "speculative-num-steps": 1,
        "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2, "speculative-adaptive": True,
        "speculative-adaptive-config": "wide.json"})
    tiers = json.dumps({"1": {"candidate_steps": [1]}, "25": {"candidate_steps": [3]}})
    _, findings = make(extends="custom-ar", spec="wide", extra={"spec/wide.toml": overlay, "spec/wide.json": tiers})
    [f] = by_rule(findings, "pcie_ipc_adaptive_tiers", "error")
    assert "adaptive tier 25 (the adaptive config " in f.message and "batches 25-48:" in f.message
    assert "cap the batches with max-running-requests = 24 under [server]" in f.message
