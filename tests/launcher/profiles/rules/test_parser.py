"""launcher.profiles.rules.parser: SGLang's real argument parser over each profile's flags."""

from __future__ import annotations

import helpers_rules
import pytest
from helpers_profiles import BUILTIN, ENV
from helpers_rules import by_rule

from launcher.profiles.plan import evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make


# ---- (e) SGLang's real parser -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "key", "expect"),
    [
        ({"tp": 8}, "server.tp", "--tp-size"),
        ({"tensor-parallel-size": 8}, "server.tensor-parallel-size", "alias; write --tp-size"),
        ({"disable-cuda-graph": True}, "server.disable-cuda-graph", "deprecated"),
        ({"cuda-graph-max-bs": 8}, "server.cuda-graph-max-bs", "ambiguous"),
        ({"no-such-flag-anywhere": 1}, "server.no-such-flag-anywhere", "has no flag --no-such-flag-anywhere"),
        ({"deepep-mode": "fast"}, "server.deepep-mode", "invalid choice: 'fast'"),
    ],
)
def test_sglang_parser_rule_rejects(make, sglang_parser, server, key, expect):
    _, findings = make(server=server, use_parser=True)
    errors = by_rule(findings, "sglang_flags", "error")
    assert len(errors) == 1
    assert errors[0].key == key and expect in errors[0].message
    assert errors[0].file == (make.path if key != "server" else None)


def test_bug_deprecated_fusion_flag_is_not_reported(make, sglang_parser):
    """SGLang 0.5.23's help says "(Deprecated: use --flashinfer-allreduce-fusion-backend=auto)"."""
    _, findings = make(server={"enable-flashinfer-allreduce-fusion": True}, use_parser=True)
    errors = by_rule(findings, "sglang_flags", "error")
    assert len(errors) == 1 and "deprecated" in errors[0].message


def test_sglang_parser_rule_is_skipped_without_parser(make):
    _, findings = make(server={"tp": 8})
    assert by_rule(findings, "sglang_flags") == []


@pytest.mark.parametrize("spec", sorted(p.stem for p in (BUILTIN / "spec").glob("*.toml")))
def test_real_profiles_pass_the_real_parser(sglang_parser, spec):
    for name in sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base"):
        _, findings = evaluate(name, spec, environ=ENV, use_parser=True)
        assert by_rule(findings, "sglang_flags") == [], name
        assert [f for f in findings if f.level == "error"] == [], name
