"""`bench tune` beside others on one server: a second tune exits 2 naming the first, and a cell that a switch
from outside disturbed is measured again, never recorded as failed (tests/helpers_tune.py: the stack)."""

from __future__ import annotations

import signal
import subprocess

import helpers_tune
import pytest
from helpers_tune import journal, on_start_plan, run_tune, tune_argv, tune_env

from testsupport.net import until
from testsupport.stack import REPO

pytestmark = pytest.mark.stack  # every test here starts a process

stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline

# Every token 100 ms: a cell of it lasts seconds. Its /metrics counts a request only from its 40th token, as
# SGLang 0.5.23's num_running_reqs can (testsupport/standin/settings.py): the tune's 24-token requests never
# show, so a switch sent from outside drains nothing and stops the server while the tune measures.
SLOW = ('description = "test: slow"\nstatus = "experimental"\nextends = "baseline"\n[env]\n'
        'STANDIN_DECODE_MS = "100"\nSTANDIN_RUNNING_GAUGE_AFTER_TOKENS = "40"\n')


def switched_to(stack, profile: str, known: set[str]) -> dict | None:
    return next((e for e in stack.status()["history"] if e.get("id") not in known and e.get("outcome") == "switched"
                 and (e.get("to") or {}).get("profile") == profile), None)


def test_a_second_tune_is_refused_and_a_cell_switched_from_outside_is_measured_again(stack, tmp_path):
    (stack.profiles_dir / "slow.toml").write_text(SLOW)
    known = {e.get("id") for e in stack.status()["history"]}
    first = subprocess.Popen(tune_argv(stack, tmp_path / "a", "--profiles", "slow", "--screen-repeats", "2"),
                             cwd=REPO, env=tune_env(stack), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: stack.status()["tune_hold"] is not None or first.poll() is not None, 120, "the first tune's hold")
        assert first.poll() is None, first.communicate()
        holder = stack.status()["tune_hold"]["holder"]
        assert f"pid {first.pid} " in holder, holder

        second = run_tune(stack, tmp_path / "b", "--profiles", "same")
        assert second.returncode == 2, second.stderr
        assert "is measuring the server behind" in second.stderr and f"pid {first.pid} " in second.stderr, second.stderr
        assert not (tmp_path / "b" / "journal.jsonl").exists()

        # the first tune switches to slow and measures it; an operator switches to same meanwhile
        until(lambda: switched_to(stack, "slow", known) or first.poll() is not None, 240, "the tune's switch to slow")
        assert first.poll() is None, first.communicate()
        theirs = stack.switch("same", "off")
        assert theirs.json()["outcome"] == "switched", theirs.text

        until(lambda: any(e["label"] == "slow+off" and e["status"] == "ok" for e in _journal(tmp_path / "a"))
              or first.poll() is not None, 300, "slow measured again")
        assert first.poll() is None, first.communicate()[1]
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 130, err
    assert f"switched from outside while measured (switch {theirs.json()['id']} to same+off" in err, err
    assert "measured again" in err
    assert not [e for e in journal(tmp_path / "a") if e["status"] == "failed"], journal(tmp_path / "a")
    assert stack.status()["tune_hold"] is None  # given back at the end
    on_start_plan(stack)


def _journal(out):
    return journal(out) if (out / "journal.jsonl").exists() else []
