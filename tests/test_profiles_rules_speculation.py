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
