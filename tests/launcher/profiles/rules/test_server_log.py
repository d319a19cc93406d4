"""launcher.profiles.rules.server_log: the activation verdicts read SGLang's INFO start-up lines."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_rules import by_rule

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


@pytest.mark.parametrize("level", ["warning", "ERROR", "critical"])
def test_a_quiet_log_level_is_an_error_where_a_backend_is_expected(make, level):
    _, findings = make(extends="fused", server={"log-level": level})
    [f] = by_rule(findings, "startup_lines_need_info_logging", "error")
    assert f.key == "server.log-level" and f.file == make.path
    assert "fusion" in f.message and "roll back" in f.message and "observability.py" in f.message


def test_a_quiet_log_level_is_a_warning_where_nothing_is_expected(make):
    _, findings = make(server={"log-level": "warning"})
    [f] = by_rule(findings, "startup_lines_need_info_logging")
    assert f.level == "warning" and "INFO start-up lines" in f.message


@pytest.mark.parametrize("level", ["info", "debug"])
def test_info_and_debug_pass(make, level):
    _, findings = make(extends="fused", server={"log-level": level})
    assert by_rule(findings, "startup_lines_need_info_logging") == []


def test_a_custom_logging_config_is_a_warning_naming_the_variable(make):
    _, findings = make(env={"SGLANG_LOGGING_CONFIG_PATH": "/etc/sglang-log.json"})
    [f] = by_rule(findings, "startup_lines_need_info_logging", "warning")
    assert f.key == "env.SGLANG_LOGGING_CONFIG_PATH" and "common.py" in f.message
