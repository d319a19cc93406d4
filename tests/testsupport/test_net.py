"""testsupport/net.py's ports and testsupport/stack.py's port-clash check, what lets `make test` run the
tests in parallel without two of them sharing a port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from testsupport import net
from testsupport.stack import port_clash


def test_worker_slices_are_disjoint_and_below_the_ephemeral_range():
    slices = [net.port_slice(f"gw{i}", "4", 10000, 32768) for i in range(4)]
    assert [(s.start, s.stop) for s in slices] == [(10000, 15692), (15692, 21384), (21384, 27076), (27076, 32768)]
    assert net.port_slice(None, None, 10000, 32768) == range(10000, 32768)  # no xdist: all of it
    assert net.port_slice("gw0", "0", 10000, 32768) == range(10000, 32768)  # nonsense counts as one worker
    with pytest.raises(RuntimeError, match="no room"):
        net.port_slice("gw0", "100", 10000, 10100)


def test_free_port_is_bindable_in_this_workers_slice_and_never_repeats_soon(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    ours = net.port_slice("gw1", "3")
    ports = [net.free_port() for _ in range(50)]
    assert all(p in ours for p in ports) and len(set(ports)) == 50
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # free when handed out


def test_free_port_skips_a_port_that_is_taken(monkeypatch):
    monkeypatch.setattr(net, "port_slice", lambda *_a: range(20000, 20003))
    monkeypatch.setattr(net, "_bindable", lambda port: port != 20001)
    assert {net.free_port() for _ in range(6)} == {20000, 20002}
    monkeypatch.setattr(net, "_bindable", lambda port: False)
    with pytest.raises(RuntimeError, match="no free port in 20000-20002"):
        net.free_port()


def test_a_port_something_listens_on_is_not_bindable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not net._bindable(s.getsockname()[1])


def test_port_clash_reads_logs_in_files_and_folders(tmp_path: Path):
    (tmp_path / "state" / "logs").mkdir(parents=True)
    log = tmp_path / "serve.log"
    log.write_text("starting\n")
    assert not port_clash(log, tmp_path / "state", tmp_path / "missing")
    (tmp_path / "state" / "logs" / "server.log").write_text("OSError: [Errno 98] Address already in use\n")
    assert port_clash(log, tmp_path / "state")

