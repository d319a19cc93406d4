"""launcher/runtime/start_lines.py: SGLang's start-up lines read per rank into a start record."""

from __future__ import annotations

from helpers_profiles import ENV

from launcher.profiles import plan as plans
from launcher.runtime import start_lines
from launcher.runtime.process.server_exec import START_MARKER
from testsupport.standin.activation import mscclpp_failure_lines
from testsupport.standin.server_args import parse_server_argv


def test_rank_prefixes_in_sglangs_format():
    assert start_lines.rank_of("[2026-11-30 10:00:01 TP3] x") == "TP3"
    assert start_lines.rank_of("[2026-11-30 10:00:01.123 DP0 PP1 TP3 EP3] x") == "PP1 TP3"
    assert start_lines.rank_of("[2026-11-30 10:00:01] x") == ""


def test_mscclpp_death_is_read_with_its_exception():
    plan = plans.build_plan("mscclpp", "off", environ=ENV)
    marker = f"{START_MARKER}{plan.name} spec off digest {plan.digest()} pid 42 start 1: x"
    (record,) = start_lines.scan("\n".join([marker, *mscclpp_failure_lines(parse_server_argv(plan.flags))]))
    cause = start_lines.cause_text(record)
    assert "Failed to initialize MSCCL++ collectives" in cause and "pymscclpp.py:1114" in cause
    assert "RuntimeError: SIMULATED MSCCL++" in cause
