"""launcher.runtime.serve.initial_plan: which plan the container starts with (no supervisord here)."""

from __future__ import annotations

import json

import pytest
from helpers_runtime import env

from launcher.errors import UserError
from launcher.profiles import sglang_args
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.admission import validated_plan
from launcher.runtime.records import state as runtime_state
from launcher.runtime.serve import initial_plan
from launcher.state_layout import StatePaths


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    env(monkeypatch)
    monkeypatch.setattr(sglang_args, "available", lambda: False)


def test_a_fresh_start_runs_the_request_and_remembers_it(tmp_path):
    paths = StatePaths(tmp_path)
    assert initial_plan(paths, "nccl-tuned", "off").name == "nccl-tuned"
    assert json.loads(paths.boot.read_text()) == {"profile": "nccl-tuned", "spec": "off", "model_overlay": ""}


def test_a_restart_with_the_same_request_resumes_the_committed_plan(tmp_path):
    paths = StatePaths(tmp_path)
    initial_plan(paths, "baseline", "off")
    runtime_state.commit(tmp_path, validated_plan("fused", "off"))  # a switch made since
    assert initial_plan(paths, "baseline", "off").name == "fused"
    assert initial_plan(paths, None, None).name == "fused"  # no PROFILE at all: the committed plan too
    assert initial_plan(paths, "nccl-tuned", "off").name == "nccl-tuned"  # a new request wins


def test_a_committed_plan_that_no_longer_validates_gives_way_to_the_request(tmp_path, monkeypatch):
    paths = StatePaths(tmp_path)
    initial_plan(paths, "baseline", "off")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "gone.toml").write_text('description = "x"\nstatus = "experimental"\nextends = "baseline"\n')
    monkeypatch.setenv("KIT_PROFILES_DIR", str(profiles))
    runtime_state.commit(tmp_path, validated_plan("gone", "off"))
    (profiles / "gone.toml").unlink()
    assert initial_plan(paths, "baseline", "off").name == "baseline"
    with pytest.raises(UserError):
        initial_plan(paths, "gone", "off")


def test_a_restart_restores_the_committed_eagle3_point(tmp_path):
    """A switch to (2,1,3) then a restart with the same request: the point comes back, not the overlay's."""
    paths = StatePaths(tmp_path)
    initial_plan(paths, "baseline", "eagle3")
    runtime_state.commit(tmp_path, validated_plan("fused", "eagle3", SpecParams(steps=2, topk=1, draft_tokens=3)))
    plan = initial_plan(paths, "baseline", "eagle3")
    assert (plan.name, plan.spec) == ("fused", "eagle3") and plan.spec_params.values() == (2, 1, 3)
    assert plan.digest() == runtime_state.committed(tmp_path).plan.digest()


def test_a_restart_restores_the_committed_model_overlay(tmp_path, monkeypatch):
    monkeypatch.setenv("MODEL_OVERLAY", "kimi-k2")
    paths = StatePaths(tmp_path)
    initial_plan(paths, "baseline", "off")
    runtime_state.commit(tmp_path, validated_plan("fused", "off"))
    plan = initial_plan(paths, "baseline", "off")
    assert (plan.name, plan.model_overlay) == ("fused", "kimi-k2")
    assert plan.digest() == runtime_state.committed(tmp_path).plan.digest()


def test_a_model_overlay_changed_since_the_last_start_is_a_new_request(tmp_path, monkeypatch):
    paths = StatePaths(tmp_path)
    initial_plan(paths, "baseline", "off")
    runtime_state.commit(tmp_path, validated_plan("fused", "off"))
    monkeypatch.setenv("MODEL_OVERLAY", "kimi-k2")
    plan = initial_plan(paths, "baseline", "off")
    assert (plan.name, plan.model_overlay) == ("baseline", "kimi-k2")  # the operator's new choice starts fresh
    monkeypatch.delenv("MODEL_OVERLAY")
    runtime_state.commit(tmp_path, validated_plan("fused", "off", model_overlay="kimi-k2"))
    monkeypatch.setenv("MODEL_OVERLAY", "kimi-k2")
    plan = initial_plan(paths, None, None)  # no PROFILE: the committed plan, with the overlay the setting names
    assert (plan.name, plan.model_overlay) == ("fused", "kimi-k2")
