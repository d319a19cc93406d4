"""bench.run.server_identity: a server restart between two identity probes, and the stand-in's simulated mark."""

from __future__ import annotations

from dataclasses import replace

from bench.run.server_identity import ServerIdentity, identity_of, is_simulated, restart_reasons


def test_restart_reasons():
    same = ServerIdentity(start_time=1.0, restarts=0, pid=10)
    assert restart_reasons(same, replace(same)) == []
    assert "start_time" in restart_reasons(same, replace(same, start_time=2.0))[0]
    assert "restart count 0 -> 1" in restart_reasons(same, replace(same, restarts=1))[0]
    assert "pid 10 -> 11" in restart_reasons(same, replace(same, pid=11))[0]
    assert "unreachable" in restart_reasons(same, None)[0]
    assert "unknown before" in restart_reasons(None, same)[0]


def test_is_simulated_reads_top_level_or_first_internal_state():
    assert is_simulated({"simulated": True})
    assert is_simulated({"internal_states": [{"simulated": True}]})
    assert not is_simulated({"internal_states": [{"avg_spec_accept_length": 2.0}]})
    assert not is_simulated({})
    assert not is_simulated({"internal_states": "garbage"})


def test_a_restart_of_a_real_0_5_23_server_is_told_by_its_per_start_signals():
    """SGLang 0.5.23's /server_info has no start_time: a new start shows as new startup_time phase durations
    and, unless --random-seed pins it, a new random_seed."""
    first = {"startup_time": {"scheduler_e2e": 41.2}, "random_seed": 7, "launch_command": "--model-path /m"}
    again = identity_of(dict(first))
    assert again.start_time is None and restart_reasons(again, identity_of(dict(first))) == []
    moved = identity_of({**first, "startup_time": {"scheduler_e2e": 44.9}, "random_seed": 8})
    reasons = restart_reasons(again, moved)
    assert any("scheduler_e2e=41.2" in r for r in reasons) and any("random_seed" in r or "seed" in r for r in reasons)
    pinned = {**first, "launch_command": "--model-path /m --random-seed 7", "random_seed": 7}
    assert identity_of(pinned).random_seed is None  # a pinned seed says nothing about a restart
