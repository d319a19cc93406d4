"""launcher.profiles.rules.request_cap: a tuned adaptive tier keyed above the server's running cap is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import helpers_rules
import pytest
from helpers_profiles import ENV
from helpers_rules import by_rule

from launcher.profiles.plan import evaluate
from testsupport.stack import REPO

_env, make = helpers_rules._env, helpers_rules.make


def test_a_tier_above_48_is_an_error_and_at_48_is_not():
    _, findings = evaluate("baseline", "eagle3-adaptive", None, environ=ENV, adaptive_tiers="1:3,32:1,64:0")
    [f] = by_rule(findings, "tiers_above_cap", "error")
    assert "adaptive tier 64 above the server's running cap 48" in f.message
    assert "--max-running-requests 64" in f.message and "speculative_hook.py:1086-1093" in f.message
    _, findings = evaluate("baseline", "eagle3-adaptive", None, environ=ENV, adaptive_tiers="1:3,32:1,48:0")
    assert by_rule(findings, "tiers_above_cap") == []


def test_the_plans_max_running_requests_raises_the_cap(make):
    tiers = "1:3,64:0,96:0"
    root = make.path.parent
    make(server={"max-running-requests": 64}, spec="eagle3-adaptive")  # writes profile t
    _, findings = evaluate("t", "eagle3-adaptive", None, environ=ENV, adaptive_tiers=tiers)
    [f] = by_rule(findings, "tiers_above_cap", "error")
    assert "tier 96 above the server's running cap 64" in f.message and "--max-running-requests" in f.message
    _, findings = evaluate("t", "eagle3-adaptive", None, environ=ENV, adaptive_tiers="1:3,64:0")
    assert by_rule(findings, "tiers_above_cap") == [] and root.is_dir()


def test_a_config_file_with_sglangs_tier_64_is_an_error_and_the_shipped_one_is_not(make):
    _, findings = evaluate("baseline", "eagle3-adaptive", None, environ=ENV)
    assert by_rule(findings, "tiers_above_cap") == []  # the kit's file leaves SGLang's tier 64 out
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

    overlay = (REPO / "profiles" / "spec" / "eagle3-adaptive.toml").read_text()  # a user spec overlay, SGLang's file
    _, findings = make(spec="eagle3-adaptive", extra={"spec/eagle3-adaptive.toml": overlay,
                                                     "spec/eagle3-adaptive.json": json.dumps(DEFAULT_ADAPTIVE_CONFIG)})
    [f] = by_rule(findings, "tiers_above_cap", "error")
    assert "adaptive tier 64 above the server's running cap 48" in f.message


@pytest.mark.stack
def test_launcher_check_exits_2():
    proc = subprocess.run([sys.executable, "-m", "launcher", "check", "baseline", "--spec", "eagle3-adaptive",
                           "--adaptive-tiers", "1:3,64:0"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**ENV, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "above the server's running cap 48" in proc.stdout + proc.stderr
