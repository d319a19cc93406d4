"""launcher.profiles.policy: what a profile may be called, set and reference."""

from __future__ import annotations

import re

import pytest

from launcher.profiles import policy


@pytest.mark.parametrize("name", ["KIT_STATE_DIR", "KIT_ANYTHING_NEW", "PYTHONPATH", "PATH", "MODEL_PATH"])
def test_the_kits_names_and_the_process_wiring_are_not_a_profiles_to_set(name):
    assert policy.reserved_env_reason(name)


@pytest.mark.parametrize("name", ["NCCL_PROTO", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "CUDA_DEVICE_MAX_CONNECTIONS"])
def test_server_variables_are_a_profiles_to_set(name):
    assert policy.reserved_env_reason(name) is None


def test_references_to_secrets_and_server_only_settings_are_refused():
    assert "secret" in policy.reference_refused("KIT_CONTROL_TOKEN")
    assert "may not read" in policy.reference_refused("KIT_STATE_DIR")
    assert policy.reference_refused("KIT_TP_SIZE") is None  # a profile knob
    assert policy.reference_refused("HOME") is None  # not the kit's


@pytest.mark.parametrize(("name", "ok"), [("fused", True), ("my.profile-2", True), ("Fused", False), ("../x", False), ("a" * 65, False)])
def test_names_follow_the_pattern(name, ok):
    assert bool(re.fullmatch(policy.NAME_PATTERN, name)) is ok
