"""launcher.profiles.rules.parent_env: variables SGLang sets in its parent, which a profile value
replaces in every TP worker; a passing and a failing case each, with level and message."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_rules import by_rule

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
