"""Where `bench run` leaves production, end to end through a real `launcher serve` stack (supervisord, control
API, stand-in; tests/helpers_tune.py): back on the plan it found after three cells and after SIGINT in the middle
of a cell, a second bench run refused meanwhile, `--leave-on` only a cell that passed the gate, and never back on
a plan the gate called WRONG."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import helpers_tune
import pytest
from helpers_tune import tune_env

from testsupport.net import until
from testsupport.stack import REPO, stop_group

pytestmark = pytest.mark.stack  # every test here starts a process

stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline
SLOW = ('description = "test: slow"\nstatus = "experimental"\nextends = "baseline"\n[env]\n'
        'STANDIN_DECODE_MS = "60"\n')


def bench_argv(stack, out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench", "run", "--url", stack.server_url, "--control", stack.control_url,
            "--spec", "off", "--repeats", "1", "--num-prompts", "2", "--max-tokens", "24", "--warmup", "0",
            "--switch-timeout", "60", "--health-timeout", "30", "--out", str(out), *extra]


def bench(stack, out, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(bench_argv(stack, out, *extra), cwd=REPO, env=tune_env(stack), capture_output=True,
                          text=True, timeout=300)


def start_on(stack, profile: str) -> dict:
    assert stack.switch(profile, "off").json()["outcome"] in ("switched", "unchanged")
    return stack.wait_state({"serving"})


def runs(stack, profile: str, digest: str | None = None) -> dict:
    st = stack.wait_state({"serving"})
    assert (st["profile"], st["spec"]) == (profile, "off"), st
    assert digest is None or st["digest"] == digest, (st["digest"], digest)
    return st


def test_three_cells_end_on_the_plan_found(stack, tmp_path):
    found = start_on(stack, "fast")
    r = bench(stack, tmp_path, "--profiles", "baseline,same,wrong")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "production back on fast+off, the plan it found" in r.stderr, r.stderr[-2000:]
    runs(stack, "fast", found["digest"])
    assert stack.status()["tune_hold"] is None  # the measuring hold is given back


def test_sigint_in_a_cell_puts_production_back_and_a_second_run_is_refused(stack, tmp_path):
    (stack.profiles_dir / "slow.toml").write_text(SLOW)
    found = start_on(stack, "fast")
    first = subprocess.Popen(bench_argv(stack, tmp_path / "a", "--profiles", "baseline,slow", "--num-prompts", "8",
                                        "--max-tokens", "64"),
                             cwd=REPO, env=tune_env(stack), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # in the middle of slow's cell: it runs, and its requests are being answered
        until(lambda: first.poll() is not None or (stack.status()["profile"] == "slow"
                                                    and stack.status()["state"] == "serving"
                                                    and list((tmp_path / "a").glob(".*.partial/slow__off.requests.jsonl"))),
              timeout=240, what="bench run measuring slow")
        assert first.poll() is None, first.communicate()
        holder = stack.status()["tune_hold"]["holder"]
        assert holder.startswith("bench run (pid ") and f"pid {first.pid} " in holder, holder

        second = bench(stack, tmp_path / "b", "--profiles", "baseline")
        assert second.returncode == 2, second.stderr[-2000:]
        assert "is measuring the server behind" in second.stderr and f"pid {first.pid} " in second.stderr
        assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())

        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            stop_group(first, 5)
        os.unlink(stack.profiles_dir / "slow.toml")
    assert first.returncode == 130, err[-3000:]
    assert "production back on fast+off, the plan it found" in err, err[-2000:]
    runs(stack, "fast", found["digest"])
    assert stack.status()["tune_hold"] is None


def test_leave_on_only_a_cell_that_passed(stack, tmp_path):
    found = start_on(stack, "same")
    wrong = bench(stack, tmp_path / "a", "--profiles", "baseline,fast,wrong", "--leave-on", "wrong+off")
    assert wrong.returncode == 2, wrong.stderr[-3000:]
    assert "--leave-on wrong+off: only a cell that passed the correctness gate is left on, and it is FAIL" in wrong.stderr
    assert "production back on same+off, the plan it found" in wrong.stderr
    runs(stack, "same", found["digest"])

    unknown = bench(stack, tmp_path / "b", "--profiles", "baseline,fast", "--leave-on", "nope+off")
    assert unknown.returncode == 2 and "--leave-on nope+off is not a cell of this run" in unknown.stderr
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())

    ok = bench(stack, tmp_path / "c", "--profiles", "baseline,fast", "--leave-on", "fast+off")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "production left on fast+off (--leave-on; it passed the correctness gate)" in ok.stderr
    runs(stack, "fast")


def test_a_plan_found_wrong_is_never_put_back(stack, tmp_path):
    start_on(stack, "wrong")
    r = bench(stack, tmp_path, "--profiles", "baseline,fast,wrong")
    assert r.returncode == 3, r.stderr[-3000:]
    assert "the plan production ran when this bench started, wrong+off, FAILed the correctness gate" in r.stderr
    assert "production now on baseline+off (the gate's reference)" in r.stderr
    runs(stack, "baseline")
