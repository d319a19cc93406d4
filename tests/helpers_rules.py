"""Shared helpers of the rule tests (tests/test_profiles_rules*.py): a one-profile evaluator, the
session's SGLang parser, findings of one rule, and the two host shapes most cases run on.

The fixtures are imported by name into each test module, which is where pytest looks for them.
"""

from __future__ import annotations

import pytest
from helpers_profiles import ENV, clean_env, facts, profile_toml, write_profiles

from launcher.profiles import rules
from launcher.profiles.plan import evaluate


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


@pytest.fixture
def make(tmp_path, monkeypatch):
    """Write one user profile `t` (plus optional extra files) and return a function that evaluates it."""
    root = tmp_path / "user"
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))

    def _make(*, facts=None, spec="off", use_parser=False, extra=None, **table):
        write_profiles(root, {"t.toml": profile_toml("t", **table), **(extra or {})})
        return evaluate("t", spec, facts, environ=ENV, use_parser=use_parser)

    _make.path = root / "t.toml"
    return _make


def by_rule(findings, name: str, level: str | None = None) -> list[rules.Finding]:
    return [f for f in findings if f.rule == name and (level is None or f.level == level)]


PCIE = facts("pcie-switch", "12.0")
NVLINK = facts("nvlink", "9.0")
