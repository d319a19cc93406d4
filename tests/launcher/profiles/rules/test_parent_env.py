"""launcher.profiles.rules.parent_env: variables SGLang sets in its parent, which a profile value
replaces in every TP worker; a passing and a failing case each, with level and message."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_profiles import ENV, profile_toml
from helpers_rules import by_rule

from launcher.errors import UserError
from launcher.profiles.plan import build_plan, evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


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


# ---- variables SGLang pins for deterministic inference -------------------------------------------

DETERMINISTIC = {"enable-deterministic-inference": True}
# what nccl-tuned sets that SGLang also pins under the flag at TP > 1 (attention_hook.py:676, 696-698)
PINNED_BY_NCCL_TUNED = ["env.NCCL_ALGO", "env.NCCL_MIN_NCHANNELS", "env.NCCL_MAX_NCHANNELS"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("NCCL_ALGO", "Ring"), ("NCCL_MIN_NCHANNELS", 2), ("NCCL_MAX_NCHANNELS", 16),
     ("SGLANG_ENABLE_DETERMINISTIC_INFERENCE", 0), ("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", 1)],
)
def test_a_profile_value_of_a_variable_sglang_pins_for_deterministic_inference_is_an_error(make, name, value):
    _, findings = make(env={name: value}, server=DETERMINISTIC)
    [f] = by_rule(findings, "deterministic_env_conflict", "error")
    assert f.key == f"env.{name}" and f.file == make.path
    assert f.message.startswith(f"{name}={value} replaces the ")
    assert "--enable-deterministic-inference" in f.message and "every TP worker" in f.message
    assert f"remove {name} from [env]" in f.message


def test_deterministic_inference_over_nccl_tuned_names_each_inherited_variable_and_the_flag(make):
    """The report's case: a profile extending nccl-tuned turns the flag on; the values come from nccl-tuned.toml."""
    _, findings = make(extends="nccl-tuned", server=DETERMINISTIC)
    errors = by_rule(findings, "deterministic_env_conflict", "error")
    assert [f.key for f in errors] == PINNED_BY_NCCL_TUNED
    assert all(f.file is not None and f.file.name == "nccl-tuned.toml" for f in errors)
    assert all(f"--enable-deterministic-inference (set in {make.path})" in f.message for f in errors)
    assert "SGLANG_DETERMINISTIC_NCCL_NCHANNELS" in errors[1].message and "allreduce:tree" in errors[0].message


def test_build_plan_refuses_deterministic_inference_over_nccl_tuned(make):
    make(extends="nccl-tuned", server=DETERMINISTIC)
    with pytest.raises(UserError) as exc:
        build_plan("t", "off", environ=ENV)
    for key in PINNED_BY_NCCL_TUNED:
        assert f"key '{key}'" in str(exc.value)
    assert "--enable-deterministic-inference" in str(exc.value)


def test_dropping_the_inherited_values_or_pinning_channels_through_sglang_passes(make):
    """The fixes the message names: `NAME = false` drops what extends brought, and SGLang's own knob sets
    the channel count it pins (read in the parent, environ.py:1531)."""
    dropped = {"NCCL_ALGO": False, "NCCL_MIN_NCHANNELS": False, "NCCL_MAX_NCHANNELS": False,
               "SGLANG_DETERMINISTIC_NCCL_NCHANNELS": 4}
    _, findings = make(extends="nccl-tuned", env=dropped, server=DETERMINISTIC)
    assert by_rule(findings, "deterministic_env_conflict") == []


def test_nccl_proto_is_not_pinned_by_sglang_so_it_is_not_refused(make):
    """SGLang's deterministic mode sets no NCCL_PROTO (attention_hook.py:667-701): a profile's protocol stands."""
    _, findings = make(env={"NCCL_PROTO": "LL,Simple"}, server=DETERMINISTIC)
    assert by_rule(findings, "deterministic_env_conflict") == []


def test_rl_on_policy_target_turns_deterministic_inference_on_too(make):
    _, findings = make(env={"NCCL_ALGO": "Ring"}, server={"rl-on-policy-target": "fsdp"})
    [f] = by_rule(findings, "deterministic_env_conflict", "error")
    assert "--rl-on-policy-target" in f.message and f.key == "env.NCCL_ALGO"


def test_at_tp_1_sglang_pins_no_nccl_variable(make):
    env = {"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": 4, "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": 1}
    _, findings = make(env=env, server={**DETERMINISTIC, "tp-size": 1})
    assert [f.key for f in by_rule(findings, "deterministic_env_conflict")] == ["env.SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"]


@pytest.mark.parametrize("server", [{}, {"enable-deterministic-inference": False}])
def test_nccl_tuned_without_deterministic_inference_passes(make, server):
    _, findings = make(extends="nccl-tuned", server=server)
    assert by_rule(findings, "deterministic_env_conflict") == []


def test_the_rule_sees_the_flag_from_a_spec_overlay_and_env_from_a_model_overlay(make):
    """The merged plan: profile, then spec overlay, then model overlay."""
    spec = {"spec/det.toml": profile_toml("deterministic spec", server=DETERMINISTIC)}
    _, findings = make(extends="nccl-tuned", extra=spec, spec="det")
    assert [f.key for f in by_rule(findings, "deterministic_env_conflict")] == PINNED_BY_NCCL_TUNED
    model = {"model/m.toml": profile_toml("model", env={"NCCL_MAX_NCHANNELS": 2})}
    make(server=DETERMINISTIC, extra=model)
    _, findings = evaluate("t", "off", None, environ=ENV, model_overlay="m")
    [f] = by_rule(findings, "deterministic_env_conflict")
    assert f.key == "env.NCCL_MAX_NCHANNELS" and f.file.name == "m.toml"
