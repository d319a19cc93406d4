"""bench/sla/settings.py: `bench sla`'s flags, and bad input as exit 2 naming the flag before anything runs."""

from __future__ import annotations

import pytest

from bench.sla import cli
from bench.sla.settings import SlaSettings

URL = ["--url", "http://127.0.0.1:1", "--control", "http://127.0.0.1:2"]
TARGETS = ["--ttft-p99-ms", "500", "--tpot-p99-ms", "50"]


@pytest.mark.parametrize(("argv", "words"), [
    ([*URL, "--tpot-p99-ms", "50"], "--ttft-p99-ms is required"),
    ([*URL, "--ttft-p99-ms", "50"], "--tpot-p99-ms is required"),
    ([*URL, "--ttft-p99-ms", "0", "--tpot-p99-ms", "50"], "--ttft-p99-ms 0"),
    ([*URL, "--ttft-p99-ms", "500", "--tpot-p99-ms", "-3"], "--tpot-p99-ms -3"),
    ([*URL, *TARGETS, "--rate-min", "5", "--rate-max", "1"], "--rate-min 5 is above --rate-max 1"),
    ([*URL, *TARGETS, "--rate-min", "0"], "--rate-min 0"),
    ([*URL, *TARGETS, "--rate-max", "inf"], "--rate-max inf"),
    ([*URL, *TARGETS, "--rate-start", "-1"], "--rate-start -1"),
    ([*URL, *TARGETS, "--precision", "0"], "--precision 0"),
    ([*URL, *TARGETS, "--precision", "-0.5"], "--precision -0.5"),
    ([*URL, *TARGETS, "--burstiness", "0"], "--burstiness 0"),
    ([*URL, *TARGETS, "--max-concurrency", "0"], "--max-concurrency 0"),
    ([*URL, *TARGETS, "--repeats", "0"], "--repeats 0"),
    ([*URL, *TARGETS, "--num-prompts", "1", "--no-switch"], "--num-prompts 1"),
    ([*URL, *TARGETS, "--no-switch", "--profiles", "a,b"], "--profiles 'a,b' with --no-switch"),
    ([*URL, *TARGETS, "--no-switch", "--eagle3", "1,1,2"], "drop --no-switch"),
    ([*URL, *TARGETS, "--profiles", ","], "--profiles is empty"),
    (["--url", "ftp://x", *TARGETS], "--url 'ftp://x'"),
])
def test_bad_input_is_exit_2_naming_the_flag(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KIT_CONTROL_TOKEN", "t")
    assert cli.main([*argv, "--out", str(tmp_path)]) == 2
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_load_flags_of_bench_run_are_not_flags_here():
    flags = {s for a in cli.SlaArgs.parser()._actions for s in a.option_strings}
    assert {"--concurrency", "--request-rate", "--leave-on", "--fleet"}.isdisjoint(flags)
    assert {"--url", "--control", "--no-switch", "--profiles", "--spec", "--eagle3", "--max-tokens", "--num-prompts",
            "--prompts", "--repeats", "--seed", "--burstiness", "--max-concurrency", "--out", "--ttft-p99-ms",
            "--tpot-p99-ms", "--rate-start", "--rate-min", "--rate-max", "--precision", "--json"} <= flags


def test_settings_extend_bench_runs_and_the_manifest_keeps_the_sla():
    given = cli.SlaArgs.parse([*URL, *TARGETS, "--rate-max", "64", "--json", "--burstiness", "4"])
    s = given.settings(["x"])
    assert isinstance(s, SlaSettings) and s.concurrency == [] and s.request_rate is None
    assert s.rate_start == 1.0 and s.rate_min == 0.1 and s.rate_max == 64.0 and s.precision == 0.1
    assert s.arrivals_at(3.0).rate == 3.0 and s.arrivals_at(3.0).burstiness == 4.0
    out = s.to_json()
    assert out["ttft_p99_ms"] == 500.0 and out["tpot_p99_ms"] == 50.0 and "json" not in out and "fleet" not in out


def test_make_sla_passes_only_declared_flags():
    import re

    from testsupport.stack import REPO

    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    given = " ".join(re.findall(r'SLA_ARGS="([^"]*)"', makefile))
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", given))
    declared = {s for a in cli.SlaArgs.parser()._actions for s in a.option_strings}
    assert {"--ttft-p99-ms", "--tpot-p99-ms"} <= named <= declared
    recipe = makefile.split("\nsla: ##", 1)[1].split("\n\n", 1)[0]
    assert recipe.rstrip().endswith("run --rm bench sla $(SLA_ARGS)")
