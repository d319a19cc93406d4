"""launcher.profiles.rules.host: a profile's [requires] and its parallel sizes against the host facts."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_profiles import ENV, facts
from helpers_rules import by_rule

from launcher.profiles.plan import evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


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
