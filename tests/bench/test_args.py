"""bench/args.py: `stop_on_interrupt` makes SIGINT (and SIGTERM) stop a command through its own stop path,
also when the shell that started it ignores SIGINT for background jobs."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from testsupport.stack import REPO

CHILD = """
import sys, time
from bench.args import stop_on_interrupt
stop_on_interrupt(sigterm=len(sys.argv) > 1)
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped cleanly", flush=True)
    sys.exit(130)
"""


def _ignoring_sigint() -> None:  # as `cmd &` in a non-interactive shell leaves it
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.stack
@pytest.mark.parametrize(("sig", "extra"), [(signal.SIGINT, []), (signal.SIGTERM, ["--sigterm"])])
def test_the_signal_reaches_the_stop_path_even_when_inherited_ignored(sig, extra):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *extra], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            preexec_fn=_ignoring_sigint, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "stopped cleanly" in out


# ---- the flags bench run and bench tune share ------------------------------------------------------


def _action(parser, name):
    return next(a for a in parser._actions if name in a.option_strings)


def test_shared_flags_are_declared_once_and_taken_by_both_commands():
    from bench import args
    from bench.run.cli import RunArgs
    from bench.run.settings import RunSettings
    from bench.tune.cli import TuneArgs
    from bench.tune.settings import TuneSettings

    shared = [v for v in vars(args).values() if isinstance(v, args.Flag)]
    assert len(shared) >= 16
    run_p, tune_p = RunArgs.parser(), TuneArgs.parser()
    for flag in shared:
        for parser in (run_p, tune_p):
            act = _action(parser, flag.name)
            assert (act.type, act.choices) == (flag.type, flag.choices), flag.name
            assert (act.metavar or flag.name[2:].upper().replace("-", "_")) == (  # as --help shows it
                flag.metavar or flag.name[2:].upper().replace("-", "_")), flag.name
            assert act.nargs == (0 if flag.switch else None)
    # each command keeps its own defaults, read from its dataclass, and says them in the help
    for cls, parser in ((RunSettings, run_p), (TuneSettings, tune_p)):
        for name, field in (("--warmup", "warmup"), ("--switch-timeout", "switch_timeout")):
            act = _action(parser, name)
            assert act.default is None and f"(default {getattr(cls, field):g})" in act.help  # left out: the field's
        # --num-prompts left out is None: every prompt of a --prompts file, else the command's default
        act = _action(parser, "--num-prompts")
        assert act.default is None and f"(default {cls.num_prompts:g}; with --prompts" in act.help
    assert RunSettings.num_prompts != TuneSettings.num_prompts
    # a flag neither command words its own way says the same in both
    for name in ("--max-tokens", "--warmup", "--workload", "--api", "--url", "--switch-timeout"):
        assert _action(run_p, name).help == _action(tune_p, name).help
    assert _action(run_p, "--seed").help != _action(tune_p, "--seed").help  # tune's seed also seeds the bootstrap


def test_each_flag_is_a_field_of_the_settings_and_left_out_is_its_default(monkeypatch):
    """The parser is built from the settings' fields: no flag without a field, and a flag left out is the field's
    default, with no second copy of it anywhere."""
    from bench.args import flag_fields
    from bench.run.cli import RunArgs
    from bench.run.settings import RunSettings
    from bench.tune.cli import TuneArgs
    from bench.tune.settings import TuneSettings

    monkeypatch.delenv("KIT_HOST_FACTS", raising=False)
    base = {RunArgs: ["--url", "http://h:1"], TuneArgs: ["--url", "http://h:1", "--profiles", "baseline"]}
    for command, cls in ((RunArgs, RunSettings), (TuneArgs, TuneSettings)):
        dests = {a.dest for a in command.parser()._actions if a.option_strings and a.dest != "help"}
        assert dests == {f.name for f, _ in flag_fields(cls)}
        s = command.parse(base[command]).settings([])
        assert isinstance(s, cls)
        for f, flag in flag_fields(cls):
            if f.name in ("url", "control", "profiles", "objective"):  # given above, or resolved (the environment)
                continue
            want = f.default_factory() if callable(f.default_factory) else f.default
            assert getattr(s, f.name) == want, flag.name
    assert TuneArgs.parse(base[TuneArgs]).settings([]).objective.kind == "tokps"


def test_a_bad_value_names_its_flag_and_the_fix():
    from bench.run.cli import RunArgs
    from launcher.errors import UserError

    for argv, words in ((["--repeats", "0"], "--repeats 0: must be at least 1"),
                        (["--warmup", "-1"], "--warmup -1: must be 0 or more"),
                        (["--read-timeout", "inf"], "--read-timeout inf: must be a positive number of seconds"),
                        (["--temperature", "-1"], "--temperature -1: give a finite number 0 or more"),
                        (["--eagle3", "1,1,3"], "--eagle3 '1,1,3'"),
                        (["--no-switch", "--eagle3", "1,1,2"], "drop --no-switch (or --eagle3)")):
        with pytest.raises(UserError, match=re.escape(words)):
            RunArgs.parse(["--url", "http://h:1", *argv]).settings([])


def test_eagle3_points_are_spec_params_and_the_manifest_keeps_their_shape():
    from bench.run.cli import RunArgs
    from launcher.profiles.spec_params import SpecParams

    s = RunArgs.parse(["--url", "http://h:1", "--eagle3", "1,1,2;3,1,4"]).settings([])
    assert s.eagle3 == [SpecParams(steps=1, topk=1, draft_tokens=2), SpecParams(steps=3, topk=1, draft_tokens=4)]
    assert s.to_json()["eagle3"] == [{"steps": 1, "topk": 1, "draft_tokens": 2}, {"steps": 3, "topk": 1, "draft_tokens": 4}]
    assert json.loads(json.dumps(s.to_json()))["eagle3"][1]["draft_tokens"] == 4
    assert RunArgs.parse(["--url", "http://h:1"]).settings([]).to_json()["eagle3"] is None


def test_shared_flags_parse_into_each_commands_args():
    from bench.run.cli import RunArgs
    from bench.tune.cli import TuneArgs

    argv = ["--num-prompts", "5", "--workload", "random", "--switch-timeout", "30", "--concurrency", "1,4"]
    for cls in (RunArgs, TuneArgs):
        a = cls.parse(argv)
        assert (a.num_prompts, a.workload, a.switch_timeout, a.concurrency) == (5, "random", 30.0, "1,4")
        s = cls.parse([*argv, "--url", "http://h:1", "--profiles", "baseline"]).settings([])
        assert (s.num_prompts, s.workload, s.switch_timeout, s.concurrency) == (5, "random", 30.0, [1, 4])
    with pytest.raises(SystemExit):
        TuneArgs.parse(["--workload", "nope"])


@pytest.mark.parametrize(("value", "words"), [("0,1", "at least 1"), ("1,x", "whole numbers"), ("", "at least 1")])
def test_positive_ints_names_the_flag(value, words):
    from bench.args import positive_ints
    from launcher.errors import UserError

    assert positive_ints("--concurrency", " 1, 4,16") == [1, 4, 16]
    with pytest.raises(UserError, match=f"--concurrency '{value}'.*{words}"):
        positive_ints("--concurrency", value)


def test_http_url_names_the_flag():
    from bench.args import http_url
    from launcher.errors import UserError

    assert http_url("--url", "http://h:1/") == "http://h:1"
    with pytest.raises(UserError, match="--control 'h:1': give an http"):
        http_url("--control", "h:1")
