"""bench.run.server_identity: a server restart between two identity probes, and the stand-in's simulated mark."""

from __future__ import annotations

from bench.run.server_identity import is_simulated, restart_reasons


def test_restart_reasons():
    same = {"start_time": 1.0, "restarts": 0, "pid": 10}
    assert restart_reasons(same, dict(same)) == []
    assert "start_time" in restart_reasons(same, {**same, "start_time": 2.0})[0]
    assert "restart count 0 -> 1" in restart_reasons(same, {**same, "restarts": 1})[0]
    assert "pid 10 -> 11" in restart_reasons(same, {**same, "pid": 11})[0]
    assert "unreachable" in restart_reasons(same, None)[0]
    assert "unknown before" in restart_reasons(None, same)[0]


def test_is_simulated_reads_top_level_or_first_internal_state():
    assert is_simulated({"simulated": True})
    assert is_simulated({"internal_states": [{"simulated": True}]})
    assert not is_simulated({"internal_states": [{"avg_spec_accept_length": 2.0}]})
    assert not is_simulated({})
    assert not is_simulated({"internal_states": "garbage"})
