"""`bench tune` end to end at its edges: bad input against the server switches nothing, and the winner rolls
through a real fleet behind sglang-router (tests/helpers_tune.py: the stack and its profiles)."""

from __future__ import annotations

import helpers_tune
import httpx
import pytest
from helpers_tune import on_start_plan, result, run_tune

from testsupport.stack import FleetStack, KitStack

pytestmark = pytest.mark.stack  # every test here starts a process

# The shared stack and the autouse reset: pytest looks fixtures up by name in the test module.
stack, from_baseline = helpers_tune.stack, helpers_tune.from_baseline


def test_bad_input_against_the_server_switches_nothing(stack, tmp_path):
    before = len(stack.history())
    bad = run_tune(stack, tmp_path, "--profiles", "baseline,nope")
    assert bad.returncode == 2 and "nope" in bad.stderr
    # a point only the server can judge (it depends on the profile's attention backend)
    point = run_tune(stack, tmp_path / "point", "--profiles", "mha", "--spec", "eagle3", "--eagle3", "2,2,4")
    assert point.returncode == 2, point.stderr[-2000:]
    assert "--eagle3: point '2,2,4' is refused by the server" in point.stderr and "trtllm_mha" in point.stderr
    assert len(stack.history()) == before
    # a budget too small for one cell, known before any switch: the last switch's time is in /status history
    assert stack.switch("fast", "off").json()["outcome"] == "switched"
    assert stack.switch("baseline", "off").json()["outcome"] == "switched"
    before = len(stack.history())
    small = run_tune(stack, tmp_path / "small", "--profiles", "baseline,fast", "--budget", "1s")
    assert small.returncode == 2 and "cannot hold the smallest honest tune" in small.stderr, small.stderr[-2000:]
    assert "--final-repeats" in small.stderr and "give --budget" in small.stderr
    assert len(stack.history()) == before  # nothing switched
    assert not list((tmp_path / "small").glob("journal.jsonl")) or not (tmp_path / "small" / "journal.jsonl").read_text()
    on_start_plan(stack)


def test_a_budget_too_small_on_a_server_never_switched_measures_nothing(kit_stack, tmp_path):
    """A fresh server's history holds no switch, but its first start is timed (`started`, supervisord's start
    to the first healthy answer): a budget that cannot hold the smallest honest tune is exit 2 before the
    first measurement, not after it."""
    fresh = kit_stack(extra_env={"STANDIN_LOAD_DELAY_S": "2"})
    [started] = fresh.history()
    assert started["outcome"] == "started" and started["durations"]["total_s"] >= 2, started
    (fresh.profiles_dir / "fast.toml").write_text(helpers_tune._profile("fast", helpers_tune.PROFILES["fast"]))
    small = run_tune(fresh, tmp_path, "--profiles", "baseline,fast", "--budget", "1s")
    assert small.returncode == 2 and "cannot hold the smallest honest tune" in small.stderr, small.stderr[-2000:]
    assert not (tmp_path / "journal.jsonl").exists() or not (tmp_path / "journal.jsonl").read_text()
    assert len(fresh.history()) == 1  # nothing switched


def test_fleet_rolls_the_winner_with_its_point(stack, tmp_path):
    hosts = [KitStack(tmp_path / f"host{i}", "baseline", "off", {"KIT_PROFILES_DIR": str(stack.profiles_dir)})
             for i in range(2)]
    (tmp_path / "fleet").mkdir()
    fleet = FleetStack(tmp_path / "fleet", hosts)
    try:
        for h in hosts:
            h.start()
        fleet.start()
        proc = run_tune(stack, tmp_path / "out", "--profiles", "baseline,quick", "--spec", "eagle3", "--eagle3",
                        "1,1,2", "--fleet", str(fleet.file))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert result(tmp_path / "out")["winner"]["label"] == "quick+eagle3(1,1,2)"
        for h in hosts:
            plan = httpx.get(f"{h.control_url}/plan", timeout=5).json()["plan"]
            assert (plan["name"], plan["spec"], plan["spec_params"]) == (
                "quick", "eagle3", {"steps": 1, "topk": 1, "draft_tokens": 2})
        assert "fleet on quick+eagle3(1,1,2): 2 host(s)" in proc.stdout + proc.stderr
        on_start_plan(stack)  # the host it tuned on goes back; the fleet got the winner
    finally:
        fleet.stop()
        for h in hosts:
            h.stop()
