"""Spec mode eagle3-adaptive: SGLang 0.5.23's run-time EAGLE adaptation (--speculative-adaptive) as a plan,
and the rules that refuse it where SGLang would silently run static speculation instead
(adaptive_unsupported_reason, srt/speculative/adaptive_spec_params.py:56-100)."""

from __future__ import annotations

import json
import subprocess
import sys

import helpers_rules
import pytest
from helpers_profiles import BUILTIN, ENV, REPO, child_env
from helpers_rules import by_rule

from launcher.errors import UserError
from launcher.profiles import plan as plans
from launcher.profiles.plan import evaluate

_env, make = helpers_rules._env, helpers_rules.make

MODE = "eagle3-adaptive"
CONFIG = BUILTIN / "spec" / f"{MODE}.json"


def _value(flags: list[str], flag: str) -> str:
    return flags[flags.index(flag) + 1]


def _errors(findings, rule: str) -> list:
    return by_rule(findings, rule, "error")


# ---- the overlay and its plan ---------------------------------------------------------------------


def test_the_mode_runs_adaptive_eagle3_with_the_shipped_tiers():
    plan = plans.build_plan("baseline", MODE, environ=ENV)
    assert "--speculative-adaptive" in plan.flags
    assert _value(plan.flags, "--speculative-algorithm") == "EAGLE3"
    assert _value(plan.flags, "--speculative-eagle-topk") == "1"
    path = _value(plan.flags, "--speculative-adaptive-config")
    assert path == str(CONFIG)  # relative in the overlay, read from the overlay's folder
    assert plan.spec_params.values() == (3, 1, 4) and plan.spec == MODE
    assert list(plan.files) == [path] and len(plan.files[path]) == 16
    assert plan.to_json()["files"] == plan.files


def test_the_shipped_tiers_are_sglangs_defaults_less_the_tier_its_cap_never_reaches():
    """The JSON is SGLang's DEFAULT_ADAPTIVE_CONFIG (adaptive_spec_params.py:28-53), written out, less its tier 64:
    EAGLE runs at most 48 requests at once (speculative_hook.py:1086-1093), so no batch reaches it."""
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG, _load_adaptive_config

    assert json.loads(CONFIG.read_text()) == {k: v for k, v in DEFAULT_ADAPTIVE_CONFIG.items() if k != "64"}
    assert "64" in DEFAULT_ADAPTIVE_CONFIG
    _, tiers = _load_adaptive_config(str(CONFIG))  # SGLang's own loader accepts it
    assert {bs: t["candidate_steps"] for bs, t in tiers.items()} == {1: [1, 3, 5, 7], 8: [0, 1, 3], 32: [0, 1]}


def test_plans_without_the_file_flag_keep_their_digest_and_json():
    plan = plans.build_plan("baseline", "eagle3", environ=ENV)
    assert plan.files == {} and "files" not in plan.to_json()


def test_the_digests_hash_the_config_content_not_its_path(tmp_path, monkeypatch):
    base = plans.build_plan("baseline", MODE, environ=ENV)
    # the same file under another path: the same digests
    moved = base.model_copy(update={
        "flags": [str(tmp_path / "x.json") if f == str(CONFIG) else f for f in base.flags],
        "files": {str(tmp_path / "x.json"): base.files[str(CONFIG)]}})
    assert (moved.digest(), moved.setup_digest()) == (base.digest(), base.setup_digest())
    # other content: other digests
    other = base.model_copy(update={"files": {str(CONFIG): "0" * 16}})
    assert other.digest() != base.digest() and other.setup_digest() != base.setup_digest()
    # read back from its JSON, the plan keeps the hash it was built with
    assert plans.Plan.from_json(base.to_json()).digest() == base.digest()


def test_a_user_overlay_names_its_own_tiers_beside_it(make):
    tiers = {"1": {"candidate_steps": [2, 4]}, "16": {"candidate_steps": [0, 2]}}
    overlay = (BUILTIN / "spec" / f"{MODE}.toml").read_text().replace(f"{MODE}.json", "mine.json")
    plan, findings = make(extra={"spec/mine.toml": overlay, "spec/mine.json": json.dumps(tiers)}, spec="mine")
    assert _value(plan.flags, "--speculative-adaptive-config") == str(make.path.parent / "spec" / "mine.json")
    # the overlay starts at 3 steps, which these tiers do not offer: SGLang would refuse to start
    [f] = _errors(findings, "adaptive_config")
    assert "not one of the adaptive config's candidate steps [0, 2, 4]" in f.message
    assert "speculative_hook.py:1416-1421" in f.message
    _, findings = evaluate("t", "mine", None, environ=ENV, spec_params="2,1,3")
    assert _errors(findings, "adaptive_config") == []


@pytest.mark.parametrize(("text", "words"), [
    ("{not json", "is not JSON"),
    ('{"default": {"candidate_steps": [1]}}', "holds no batch-size tier"),
    ('{"1": {"candidate_steps": []}}', "candidate_steps must be a non-empty list"),
    ('{"1": {"candidate_steps": [1, -1]}}', "candidate_steps must be a non-empty list"),
])
def test_a_config_sglang_cannot_load_is_refused(make, text, words):
    overlay = (BUILTIN / "spec" / f"{MODE}.toml").read_text().replace(f"{MODE}.json", "bad.json")
    _, findings = make(extra={"spec/bad.toml": overlay, "spec/bad.json": text}, spec="bad")
    [f] = _errors(findings, "adaptive_config")
    assert words in f.message and "adaptive_spec_params.py:103-139" in f.message


def test_a_missing_config_is_refused(make):
    overlay = (BUILTIN / "spec" / f"{MODE}.toml").read_text().replace(f"{MODE}.json", "gone.json")
    _, findings = make(extra={"spec/gone.toml": overlay}, spec="gone")
    [f] = _errors(findings, "adaptive_config")
    assert "cannot be read" in f.message


def test_a_quiet_log_level_is_refused(make):
    _, findings = make(server={"log-level": "warning"}, spec=MODE)
    [f] = [f for f in _errors(findings, "adaptive_config") if f.key == "server.log-level"]
    assert "AdaptiveSpeculativeParams initialized" in f.message and "adaptive_spec_params.py:298-303" in f.message


# ---- where SGLang would fall back to static speculation -------------------------------------------


def test_the_overlay_passes_every_rule(make):
    _, findings = make(server={"mem-fraction-static": 0.8}, spec=MODE)
    assert [f for f in findings if f.level == "error"] == []


def test_top_k_above_one_is_refused_and_blamed_on_the_option():
    _, findings = evaluate("baseline", MODE, None, environ=ENV, spec_params="3,2,4")
    [f] = _errors(findings, "adaptive_fallback")
    assert f.key == "server.speculative-eagle-topk" and f.option == "--spec-params 3,2,4"
    assert "only top-k 1 adapts (srt/speculative/adaptive_spec_params.py:75-79)" in f.message
    assert "Falling back to static speculative params." in f.message
    with pytest.raises(UserError, match="only top-k 1 adapts"):
        plans.build_plan("baseline", MODE, environ=ENV, spec_params="3,2,4")


@pytest.mark.parametrize(("key", "where"), [
    ("enable-dp-attention", "adaptive_spec_params.py:80-84"),
    ("enable-multi-layer-eagle", "adaptive_spec_params.py:85-89"),
    ("enable-two-batch-overlap", "adaptive_spec_params.py:90-94"),
    ("enable-pdmux", "adaptive_spec_params.py:95-99"),
])
def test_each_unsupported_feature_is_refused(make, key, where):
    _, findings = make(server={key: True}, spec=MODE)
    [f] = _errors(findings, "adaptive_fallback")
    assert f.key == f"server.{key}" and where in f.message and "speculative_hook.py:1380-1384" in f.message
    _, findings = make(server={key: True}, spec="eagle3")  # static EAGLE-3: nothing to fall back from
    assert _errors(findings, "adaptive_fallback") == []


def test_adaptive_with_another_algorithm_is_refused(make):
    ngram = (BUILTIN / "spec" / "ngram.toml").read_text() + "speculative-adaptive = true\n"
    _, findings = make(extra={"spec/ngram-adaptive.toml": ngram}, spec="ngram-adaptive")
    [f] = _errors(findings, "adaptive_fallback")
    assert "speculative-algorithm NGRAM" in f.message and "adaptive_spec_params.py:61-65" in f.message


@pytest.mark.stack
def test_launcher_check_exits_2_on_a_refused_point():
    proc = subprocess.run([sys.executable, "-m", "launcher", "check", "baseline", "--spec", MODE,
                           "--spec-params", "3,2,4"], cwd=REPO, env=child_env(PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "only top-k 1 adapts" in proc.stdout + proc.stderr


def test_a_profiles_static_point_is_not_applied_under_adaptive(tmp_path, monkeypatch):
    """A tune's winner pins a static point ([spec_params] 2,1,3); 2 is no candidate step of the default tiers,
    so applying it under eagle3-adaptive would make the profile refuse this mode. It applies under eagle3."""
    (tmp_path / "won.toml").write_text('description = "a tune winner"\nextends = "baseline"\n'
                                       "[spec_params]\nsteps = 2\ntopk = 1\ndraft_tokens = 3\n")
    monkeypatch.setenv("KIT_PROFILES_DIR", str(tmp_path))
    plan, findings = evaluate("won", MODE, None, environ=ENV)
    assert plan.spec_params.values() == (3, 1, 4) and plan.spec_params_from is None
    assert [f for f in findings if f.level == "error"] == []
    static, _ = evaluate("won", "eagle3", None, environ=ENV)
    assert static.spec_params.values() == (2, 1, 3) and static.spec_params_from == str(tmp_path / "won.toml")
