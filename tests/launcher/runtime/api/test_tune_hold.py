"""tune_hold: one holder at a time, renewed by its id, lapsing without renewal, kept on disk and read
defensively; the control API's POST/DELETE /hold over it."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from launcher.runtime.api import control_api, tune_hold
from launcher.state_layout import StatePaths

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_one_holder_at_a_time_until_it_lapses(tmp_path):
    first = tune_hold.take(tmp_path, "tune A", 60, now=1000.0)
    with pytest.raises(tune_hold.Held, match="held by tune A"):
        tune_hold.take(tmp_path, "tune B", 60, now=1030.0)
    renewed = tune_hold.take(tmp_path, "tune A", 60, first.id, now=1050.0)
    assert renewed.id == first.id and renewed.since == 1000.0 and renewed.expires_at == 1110.0
    with pytest.raises(tune_hold.Held):
        tune_hold.take(tmp_path, "tune B", 60, now=1100.0)  # renewed: still A's
    second = tune_hold.take(tmp_path, "tune B", 60, now=1111.0)  # lapsed: B may take it
    assert second.id != first.id and tune_hold.current(tmp_path, 1111.0).holder == "tune B"
    with pytest.raises(tune_hold.Held, match="held by tune B"):  # A, late, cannot renew what B holds
        tune_hold.take(tmp_path, "tune A", 60, first.id, now=1112.0)


def test_a_lapsed_hold_cannot_be_renewed_by_its_id(tmp_path):
    first = tune_hold.take(tmp_path, "tune A", 10, now=0.0)
    with pytest.raises(tune_hold.Held, match="lapsed"):
        tune_hold.take(tmp_path, "tune A", 10, first.id, now=20.0)


def test_release_needs_the_id_in_force(tmp_path):
    hold = tune_hold.take(tmp_path, "tune A", 60)
    assert tune_hold.release(tmp_path, "not-it") is False
    assert tune_hold.current(tmp_path) is not None
    assert tune_hold.release(tmp_path, hold.id) is True
    assert tune_hold.current(tmp_path) is None and not StatePaths(tmp_path).tune_hold.exists()
    assert tune_hold.release(tmp_path, hold.id) is False


@pytest.mark.parametrize("damage", ["", "{", "[]", '{"id": 1}', '{"id": "x", "holder": "h", "since": 0}'])
def test_a_damaged_file_holds_nothing(tmp_path, damage):
    StatePaths(tmp_path).tune_hold.write_text(damage)
    assert tune_hold.current(tmp_path) is None
    assert tune_hold.take(tmp_path, "tune A", 60).holder == "tune A"


def test_the_view_never_shows_the_id(tmp_path):
    hold = tune_hold.take(tmp_path, "tune A", 60, now=100.0)
    view = hold.view(130.0)
    assert view == {"holder": "tune A", "host": None, "pid": None, "since": 100.0, "expires_in_s": 30.0}
    assert hold.id not in str(view)


def test_a_holder_is_taken_over_only_by_its_host_and_pid(tmp_path):
    first = tune_hold.take(tmp_path, "tune A", 60, host="box", pid=42, now=0.0)
    for host, pid in (("box", 43), ("other", 42), (None, 42)):
        with pytest.raises(tune_hold.Held):
            tune_hold.take(tmp_path, "tune B", 60, host=host, pid=7, take_over_pid=pid, now=1.0)
    second = tune_hold.take(tmp_path, "tune B", 60, host="box", pid=7, take_over_pid=42, now=2.0)
    assert second.id != first.id and (second.holder, second.pid, second.since) == ("tune B", 7, 2.0)
    with pytest.raises(tune_hold.Held):  # the one taken over cannot renew
        tune_hold.take(tmp_path, "tune A", 60, first.id, host="box", pid=42, now=3.0)


class _Lifecycle:
    def __init__(self, sd):
        self.sd = sd


def call(tmp_path, steps):
    async def go():
        app = control_api.web.Application(middlewares=[control_api.no_tracebacks])
        app[control_api.LIFECYCLE] = _Lifecycle(tmp_path)
        app[control_api.TOKEN] = TOKEN
        app.router.add_post("/hold", control_api.post_hold)
        app.router.add_delete("/hold", control_api.delete_hold)
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, body, headers in steps:
                r = await client.request(method, "/hold", data=body, headers=headers)
                out.append((r.status, await r.json()))
            return out

    return asyncio.run(go())


def test_hold_routes_grant_refuse_renew_and_release(tmp_path):
    [(c1, b1), (c2, b2)] = call(tmp_path, [
        ("POST", '{"holder": "tune A", "ttl_s": 60}', AUTH),
        ("POST", '{"holder": "tune B", "ttl_s": 60}', AUTH),
    ])
    assert c1 == 200 and isinstance(b1["id"], str)
    assert c2 == 409 and "held by tune A" in b2["error"] and b2["tune_hold"]["holder"] == "tune A"
    assert "id" not in b2["tune_hold"]
    [(c3, b3), (c4, b4), (c5, b5)] = call(tmp_path, [
        ("POST", f'{{"holder": "tune A", "ttl_s": 60, "id": "{b1["id"]}"}}', AUTH),
        ("DELETE", f'{{"id": "{b1["id"]}"}}', AUTH),
        ("POST", '{"holder": "tune B", "ttl_s": 60}', AUTH),
    ])
    assert (c3, b3["id"]) == (200, b1["id"]) and (c4, b4) == (200, {"released": True}) and c5 == 200


@pytest.mark.parametrize("method, body, headers, code, words", [
    ("POST", '{"holder": "a", "ttl_s": 60}', {}, 401, "bearer token"),
    ("POST", "not json", AUTH, 400, "not valid JSON"),
    ("POST", '{"holder": "", "ttl_s": 60}', AUTH, 400, "holder"),
    ("POST", '{"holder": "a", "ttl_s": 0}', AUTH, 400, "ttl_s"),
    ("POST", '{"holder": "a", "ttl_s": 99999}', AUTH, 400, "ttl_s"),
    ("POST", '{"holder": "a", "ttl_s": "60"}', AUTH, 400, "ttl_s"),
    ("POST", '{"holder": "a", "ttl_s": 60, "extra": 1}', AUTH, 400, "extra"),
    ("DELETE", "{}", AUTH, 400, "id"),
    ("DELETE", '{"id": 5}', AUTH, 400, "id"),
])
def test_bad_hold_requests_are_refused_and_change_nothing(tmp_path, method, body, headers, code, words):
    [(status, answer)] = call(tmp_path, [(method, body, headers)])
    assert status == code and words in answer["error"], answer
    assert tune_hold.current(tmp_path) is None


# ----- numbers from outside are bounded ------------------------------------------------------------------
@pytest.mark.parametrize("body, words", [
    ('{"holder": "a", "ttl_s": 60, "pid": 1099511627776}', "pid"),  # 2**40: os.kill in a client overflowed
    ('{"holder": "a", "ttl_s": 60, "pid": 4194305}', "pid"),
    ('{"holder": "a", "ttl_s": 60, "pid": 0}', "pid"),
    ('{"holder": "a", "ttl_s": 60, "host": "box", "take_over_pid": 1099511627776}', "take_over_pid"),
    ('{"holder": "a", "ttl_s": 1e-300}', "ttl_s"),
    ('{"holder": "a", "ttl_s": 0.5}', "ttl_s"),
    ('{"holder": "a", "ttl_s": Infinity}', "ttl_s"),
])
def test_hold_numbers_out_of_bounds_are_400(tmp_path, body, words):
    [(status, answer)] = call(tmp_path, [("POST", body, AUTH)])
    assert status == 400 and words in answer["error"], answer
    assert tune_hold.current(tmp_path) is None


def test_the_largest_pid_and_the_shortest_ttl_are_granted(tmp_path):
    [(status, answer)] = call(tmp_path, [("POST", '{"holder": "a", "ttl_s": 1, "host": "box", "pid": 4194304}', AUTH)])
    assert status == 200 and answer["tune_hold"]["pid"] == tune_hold.PID_MAX


@pytest.mark.parametrize("fields", [
    '"since": 0, "expires_at": Infinity',
    '"since": 0, "expires_at": 1e999',
    '"since": NaN, "expires_at": 2000',
    '"since": 0, "expires_at": 1e300',  # finite, but no grant runs that long: it would never lapse
    '"since": 99999, "expires_at": 2000',  # taken in the future
    '"since": 0, "expires_at": 2000, "pid": 1099511627776',
    '"since": 0, "expires_at": 2000, "pid": "42"',
])
def test_a_kept_hold_no_grant_makes_holds_nothing(tmp_path, capsys, fields):
    path = StatePaths(tmp_path).tune_hold
    path.write_text(f'{{"id": "i", "holder": "h", {fields}}}')
    assert tune_hold.current(tmp_path, now=1000.0) is None
    assert tune_hold.current(tmp_path, now=1000.0) is None
    [line] = capsys.readouterr().err.splitlines()
    assert f"warning: ignoring {path}" in line and "no tune hold is in force" in line
    assert tune_hold.take(tmp_path, "tune A", 60, now=1000.0).holder == "tune A"  # the damaged file is replaced
