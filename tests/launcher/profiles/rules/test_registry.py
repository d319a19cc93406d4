"""launcher.profiles.rules: the registry, its order, findings, and every built-in profile on the target host.

Each rule's own cases are in tests/test_profiles_rules_<topic>.py, one file per topic module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import helpers_rules
from helpers_profiles import BUILTIN, ENV, facts

from launcher.profiles import rules
from launcher.profiles.plan import evaluate

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env = helpers_rules._env

# The topic modules, each a few rules; `context` holds what they share.
TOPICS = sorted(m.name for m in pkgutil.iter_modules(rules.__path__) if m.name != "context")


def test_builtin_profiles_on_the_target_host():
    """8x SM120 over PCIe with working P2P: everything but symm-mem is eligible."""
    host = facts("pcie-cross-socket", "12.0", p2p_ok=True)
    blocked = set()
    for name in sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base"):
        _, findings = evaluate(name, "eagle3", host, environ=ENV)
        if any(f.level in ("error", "ineligible") for f in findings):
            blocked.add(name)
    assert blocked == {"symm-mem"}


def test_finding_render_names_file_and_key():
    f = rules.Finding("error", "r", "env.X", "fix it", Path("/p/x.toml"))
    assert f.render() == "/p/x.toml: key 'env.X': fix it"
    assert rules.Finding("error", "r", "env.X", "fix it").render() == "key 'env.X': fix it"
    assert rules.Finding("error", "r", "", "fix it").render() == "fix it"


def test_every_rule_of_a_topic_module_is_registered_once():
    """RULES is written out by hand (its order is the findings' order): a rule left out would never run."""
    registered = [fn for fn, _ in rules.RULES]
    assert len(registered) == len(set(registered))
    defined = set()
    for topic in TOPICS:
        module = importlib.import_module(f"launcher.profiles.rules.{topic}")
        defined |= {
            fn
            for name, fn in inspect.getmembers(module, inspect.isfunction)
            if fn.__module__ == module.__name__ and not name.startswith("_")
        }
    assert defined == set(registered)
    assert [fn for fn, needs_parser in rules.RULES if needs_parser] == [rules.parser.sglang_flags]


def test_every_registered_rule_is_tested():
    """A new rule in launcher/profiles/rules/ needs its own cases in tests/test_profiles_rules_<topic>.py."""
    here = Path(__file__).resolve().parent
    text = "".join((here / f"test_{topic}.py").read_text() for topic in TOPICS)
    tested = set(re.findall(r'by_rule\(\s*findings,\s*"(\w+)"', text))
    assert {fn.__name__ for fn, _ in rules.RULES} <= tested
