"""launcher.profiles.rules.env_file: a plan whose environment the server would never get (profile.env over the
cap sitecustomize applies, or an entry too long to exec with) is refused before anything runs."""

from __future__ import annotations

import helpers_rules
from helpers_profiles import profile_toml
from helpers_rules import by_rule

from launcher.profiles import env_file

# Fixtures shared by the rule tests: pytest looks them up by name in the test module.
_env, make = helpers_rules._env, helpers_rules.make

CHUNK = 100_000


def test_an_env_over_the_cap_is_an_error_naming_the_size_the_cap_and_the_longest_key(make):
    half = {f"HALF_{i}": "h" * CHUNK for i in range(6)}  # in the parent: each file stays under 1 MiB
    _, findings = make(extends="half", env={f"MINE_{i}": "m" * CHUNK for i in range(5)} | {"LONGEST": "l" * (CHUNK + 1)},
                       extra={"half.toml": profile_toml("half", extends="baseline", env=half)})
    [f] = by_rule(findings, "env_file_size", "error")
    assert f.key == "env.LONGEST" and f.file == make.path
    assert "bytes as profile.env, over the 1048576 bytes sitecustomize applies" in f.message
    assert "sitecustomize/sitecustomize.py ignores a larger file whole" in f.message and "(LONGEST)" in f.message


def test_an_entry_too_long_to_exec_with_is_an_error_naming_it(make):
    _, findings = make(extends="baseline", env={"BIG": "b" * env_file.MAX_ENTRY_BYTES})
    [f] = by_rule(findings, "env_file_size", "error")
    assert f.key == "env.BIG" and f.file == make.path and "MAX_ARG_STRLEN" in f.message


def test_an_ordinary_env_passes(make):
    _, findings = make(extends="nccl-tuned", env={"NCCL_MIN_NCHANNELS": "4", "BIG": "b" * (CHUNK - 1)})
    assert by_rule(findings, "env_file_size") == []
