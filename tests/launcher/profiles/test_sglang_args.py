"""launcher.profiles.sglang_args: SGLang 0.5.23's own parser catches renamed, ambiguous, aliased and deprecated flags."""

from __future__ import annotations

import pytest
from helpers_profiles import BUILTIN, ENV, clean_env

from launcher.profiles import sglang_args
from launcher.profiles.plan import build_plan

BASE = ["--model-path", "/models/target", "--tp-size", "8"]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


@pytest.fixture
def parser(sglang_parser):
    return sglang_parser


def test_sglang_is_importable_at_the_pinned_version(parser):
    assert sglang_args.available()
    assert sglang_args.version() == "0.5.23"
    assert sglang_args.parser() is parser  # cached


def test_parser_refuses_abbreviations(parser):
    assert parser.allow_abbrev is False
    with pytest.raises(sglang_args.ParserError):
        parser.parse_args([*BASE, "--tp", "8"])


def test_parser_error_does_not_exit_or_print(parser, capsys):
    with pytest.raises(sglang_args.ParserError, match="invalid choice"):
        parser.parse_args([*BASE, "--deepep-mode", "fast"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("flags", "flag", "expect"),
    [
        (["--tp", "8"], "--tp", "abbreviated or ambiguous flag --tp (matches --tp-size)"),
        (["--tensor-parallel-size", "8"], "--tensor-parallel-size", "alias; write --tp-size"),
        (["--disable-cuda-graph"], "--disable-cuda-graph", "deprecated in SGLang 0.5.23"),
        (
            ["--cuda-graph-max-bs", "8"],
            "--cuda-graph-max-bs",
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (["--speculative-algo", "EAGLE3"], "--speculative-algo", "abbreviated or ambiguous"),
        (["--no-such-flag"], "--no-such-flag", "SGLang 0.5.23 has no flag --no-such-flag"),
    ],
)
def test_flag_problems_by_name(parser, flags, flag, expect):
    problems = sglang_args.flag_problems([*BASE, *flags])
    assert len(problems) == 1
    assert problems[0][0] == flag
    assert expect in problems[0][1]


def test_bug_deprecated_fusion_flag_passes_the_check(parser):
    """`--enable-flashinfer-allreduce-fusion` is deprecated in 0.5.23: its help starts "(Deprecated: use ...)"."""
    problems = sglang_args.flag_problems([*BASE, "--enable-flashinfer-allreduce-fusion"])
    assert [p[0] for p in problems] == ["--enable-flashinfer-allreduce-fusion"]
    assert "deprecated" in problems[0][1]


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        (["--deepep-mode", "fast"], "invalid choice: 'fast'"),
        (["--tp-size", "eight"], "invalid int value: 'eight'"),
        (["--cuda-graph-backend-decode", "on"], "invalid choice: 'on'"),
    ],
)
def test_values_are_checked_by_a_full_parse(parser, flags, expect):
    [(flag, message)] = sglang_args.flag_problems([*BASE, *flags])
    assert flag == flags[0]  # named, so the finding points at the profile key that set it
    assert message.startswith("SGLang's parser rejects the command line") and expect in message


def test_missing_required_model_path(parser):
    [(flag, message)] = sglang_args.flag_problems(["--tp-size", "8"])
    assert "--model-path" in message and flag == ""  # argparse names no single offending argument


def test_flags_with_equals_are_checked_by_name(parser):
    problems = sglang_args.flag_problems([*BASE, "--tp=8"])
    assert problems and problems[0][0] == "--tp"


def test_good_command_line_has_no_problems(parser):
    flags = [*BASE, "--cuda-graph-max-bs-decode", "8", "--deepep-mode", "low_latency", "--trust-remote-code"]
    assert sglang_args.flag_problems(flags) == []


@pytest.mark.parametrize("spec", sorted(p.stem for p in (BUILTIN / "spec").glob("*.toml")))
def test_every_builtin_plan_parses(parser, spec):
    for name in sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base"):
        plan = build_plan(name, spec, environ=ENV)
        assert sglang_args.flag_problems(plan.flags) == [], name
        ns = parser.parse_args(plan.flags)
        assert ns.model_path == "/models/target"
        assert ns.tp_size == 8


def test_help_that_mentions_a_deprecated_flag_is_not_deprecated(parser):
    """`--smg-grpc-mode`'s help says "Replaces the deprecated --grpc-mode"; it is the current flag."""
    assert sglang_args.flag_problems([*BASE, "--smg-grpc-mode"]) == []
