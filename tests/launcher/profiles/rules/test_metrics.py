"""launcher.profiles.rules.metrics: the switch's drain reads /metrics, so no profile may turn it off."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_rules import by_rule

from launcher.errors import UserError

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


def test_a_profile_that_turns_off_metrics_is_refused_naming_the_drain(make):
    from helpers_profiles import ENV

    from launcher.profiles.plan import build_plan

    _, findings = make(server={"enable-metrics": False})
    [f] = by_rule(findings, "metrics_needed_by_drain", "error")
    assert f.key == "server.enable-metrics" and f.file == make.path
    assert "drain" in f.message and "running requests" in f.message and "sglang:num_running_reqs" in f.message
    with pytest.raises(UserError, match="enable-metrics must stay true"):
        build_plan("t", "off", None, environ=ENV)


def test_metrics_on_as_base_sets_it_passes(make):
    _, findings = make(server={"mem-fraction-static": 0.8}, spec="eagle3")
    assert by_rule(findings, "metrics_needed_by_drain") == []
