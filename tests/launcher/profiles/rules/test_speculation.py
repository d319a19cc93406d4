"""launcher.profiles.rules.speculation: speculation belongs to the spec overlay, never to a profile."""

from __future__ import annotations

import helpers_rules
from helpers_rules import by_rule

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


# ---- speculation belongs to the spec overlay ----------------------------------------------------


def test_speculation_in_profile_warns(make):
    plan, findings = make(server={"speculative-num-steps": 5}, spec="off")
    [f] = by_rule(findings, "speculation_in_profile", "warning")
    assert f.key == "server.speculative-num-steps" and "--spec" in f.message
    assert f.message in plan.warnings


def test_speculation_from_the_overlay_does_not_warn(make):
    _, findings = make(server={"mem-fraction-static": 0.8}, spec="eagle3")
    assert by_rule(findings, "speculation_in_profile") == []


# ---- EAGLE's (steps, topk, draft tokens) against SGLang's own checks ------------------------------


def test_eagle_spec_params_passes_the_overlay_and_chain_points(make):
    from helpers_profiles import ENV

    from launcher.profiles.plan import evaluate

    _, findings = make(server={"mem-fraction-static": 0.8}, spec="eagle3")
    assert by_rule(findings, "eagle_spec_params") == []
    for point in ("1,1,2", "5,1,6", "3,4,8"):
        _, findings = evaluate("t", "eagle3", None, environ=ENV, spec_params=point)
        assert by_rule(findings, "eagle_spec_params") == [], point


def test_eagle_spec_params_refuses_what_sglang_would_change_or_fail_on(make):
    from helpers_profiles import ENV

    from launcher.profiles.plan import evaluate

    make(server={"attention-backend": "trtllm_mha", "page-size": 16}, spec="eagle3")
    for point, words in (("3,1,5", "replaces draft tokens by steps + 1 = 4"),
                         ("2,4,40", "draft tree holds 20 candidates"),
                         ("3,4,8", "trtllm_mha attention backend only supports top-k 1"),
                         ("3,4,8", "page-size 16 needs attention backend flashinfer/fa3/triton")):
        _, findings = evaluate("t", "eagle3", None, environ=ENV, spec_params=point)
        assert any(words in f.message for f in by_rule(findings, "eagle_spec_params", "error")), (point, words)


def test_eagle_spec_params_reports_an_overlay_value_below_1(make):
    _, findings = make(spec="eagle3", extra={"spec/eagle3.toml": (
        'description = "e"\n[server]\nspeculative-algorithm = "EAGLE3"\nspeculative-num-steps = 0\n'
        'speculative-eagle-topk = 1\nspeculative-num-draft-tokens = 1\n')})
    [f] = by_rule(findings, "eagle_spec_params", "error")
    assert f.key == "server.speculative-num-steps" and "whole number from 1" in f.message


# ---- adaptive EAGLE (--speculative-adaptive): refused where SGLang would fall back ---------------------
# (more cases, the plan and the config file: tests/launcher/profiles/test_spec_adaptive.py)


def test_adaptive_fallback_refuses_dp_attention_under_eagle3_adaptive(make):
    _, findings = make(server={"enable-dp-attention": True}, spec="eagle3-adaptive")
    [f] = by_rule(findings, "adaptive_fallback", "error")
    assert f.key == "server.enable-dp-attention" and "adaptive_spec_params.py:80-84" in f.message
    _, findings = make(server={"mem-fraction-static": 0.8}, spec="eagle3-adaptive")
    assert by_rule(findings, "adaptive_fallback") == []


def test_adaptive_config_refuses_steps_outside_the_candidates():
    from helpers_profiles import ENV

    from launcher.profiles.plan import evaluate

    _, findings = evaluate("baseline", "eagle3-adaptive", None, environ=ENV, spec_params="2,1,3")
    [f] = by_rule(findings, "adaptive_config", "error")
    assert "[0, 1, 3, 5, 7]" in f.message and f.option == "--spec-params 2,1,3"
    _, findings = evaluate("baseline", "eagle3-adaptive", None, environ=ENV, spec_params="5,1,6")
    assert by_rule(findings, "adaptive_config") == []
