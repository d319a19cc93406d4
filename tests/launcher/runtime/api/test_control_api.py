"""launcher.runtime.api.control_api in-process (aiohttp's test client) over a Lifecycle whose supervisord and
server are fakes: the switch answers the typed entry as JSON, bad input is 400, a busy server 409."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers_runtime import AUTH, TOKEN, control_app, env

from launcher.profiles import sglang_args
from launcher.runtime import switch as switch_mod
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.core import transitions
from launcher.runtime.core.states import Outcome, State


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    env(monkeypatch)
    monkeypatch.setattr(switch_mod, "LOG_GRACE_S", 0.02)
    monkeypatch.setattr(sglang_args, "available", lambda: False)  # SGLang's parser takes seconds to build


def api(tmp_path, body):
    """Run `body(client, lifecycle, sup, server)` against the app, its monitor running on the fakes."""
    return control_app(tmp_path, TOKEN, body)


def test_a_switch_answers_the_history_entry_and_the_status(tmp_path):
    async def body(client, lc, sup, server):
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off"}, headers=AUTH)
        data = await r.json()
        assert r.status == 200 and data["outcome"] == "switched" and data["status"]["profile"] == "nccl-tuned"
        assert set(data) >= {"ts", "id", "from", "to", "durations", "error", "backends", "status"}
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off"}, headers=AUTH)
        data = await r.json()
        assert (r.status, data["outcome"], data["durations"]) == (200, "unchanged", {})
        assert "ts" not in data

    api(tmp_path, body)


def test_a_failed_switch_is_500_with_the_reason(tmp_path):
    async def body(client, lc, sup, server):
        server.health = lambda: 200 if lc.switcher.phase is None else 503
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off", "timeout_s": 0.05}, headers=AUTH)
        data = await r.json()
        assert r.status == 500 and data["outcome"] == "failed" and data["rollback_error"].startswith("health timeout")
        assert data["status"]["state"] == "failed"

    api(tmp_path, body)


def test_bad_input_is_400_and_a_busy_server_409(tmp_path):
    async def body(client, lc, sup, server):
        r = await client.post("/switch", data=b"{", headers=AUTH)
        assert r.status == 400 and "not valid JSON" in (await r.json())["error"]
        r = await client.post("/switch", json={"profile": "nccl-tuned", "timeout_s": -1}, headers=AUTH)
        assert r.status == 400 and "timeout_s" in (await r.json())["error"]
        r = await client.post("/switch", json={"profile": "nccl-tuned"})
        assert r.status == 401
        await lc.lock.acquire()
        try:
            r = await client.post("/switch", json={"profile": "nccl-tuned"}, headers=AUTH)
            assert r.status == 409
        finally:
            lc.lock.release()
        assert sup.stops == 0

    api(tmp_path, body)


def test_deterministic_inference_over_nccl_tuned_is_400_from_check_and_switch(tmp_path, monkeypatch):
    """Rule deterministic_env_conflict refuses the plan before anything stops: both routes name the flag and
    each NCCL variable nccl-tuned would set over SGLang's in every TP worker."""
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "det.toml").write_text(
        'extends = "nccl-tuned"\ndescription = "x"\n[server]\nenable-deterministic-inference = true\n')
    monkeypatch.setenv("KIT_PROFILES_DIR", str(tmp_path / "u"))

    async def body(client, lc, sup, server):
        for route in ("/check", "/switch"):
            r = await client.post(route, json={"profile": "det", "spec": "off"}, headers=AUTH)
            error = (await r.json())["error"]
            assert r.status == 400 and "--enable-deterministic-inference" in error, (route, error)
            assert all(f"key 'env.{n}'" in error for n in ("NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"))
        assert sup.stops == 0 and lc.current.name == "baseline"

    api(tmp_path, body)


def test_status_shows_the_state_machine_as_it_moves(tmp_path):
    async def body(client, lc, sup, server):
        st = await (await client.get("/status")).json()
        assert (st["state"], st["phase"], st["retry"]) == ("serving", None, {"attempts": 0, "next_at": None})
        sup.crash()
        for _ in range(400):
            st = await (await client.get("/status")).json()
            if st["state"] == "down":
                break
            await asyncio.sleep(0.01)
        assert st["state"] == "down" and "server down" in st["last_error"]

    api(tmp_path, body)


def test_status_shows_the_tune_hold_without_its_id_and_a_switch_still_runs(tmp_path):
    async def body(client, lc, sup, server):
        assert (await (await client.get("/status")).json())["tune_hold"] is None
        r = await client.post("/hold", json={"holder": "bench tune (pid 1)", "ttl_s": 60}, headers=AUTH)
        hold_id = (await r.json())["id"]
        st = await (await client.get("/status")).json()
        assert st["tune_hold"]["holder"] == "bench tune (pid 1)" and hold_id not in str(st)
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off"}, headers=AUTH)
        assert (await r.json())["outcome"] == "switched"  # the hold keeps tunes apart, never an operator out

    api(tmp_path, body)


def test_a_tuned_adaptive_config_is_checked_switched_to_and_bad_ones_are_400(tmp_path, monkeypatch):
    """`adaptive_tiers` in /check and /switch (launcher/profiles/adaptive_tiers.py): refused with 400 and nothing
    changed when malformed or outside eagle3-adaptive; written into the state dir when switched to."""
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path))

    async def body(client, lc, sup, server):
        for bad, words in (({"1": [0]}, "every tier has 0 steps"), ({"x": [1]}, "no batch size"),
                           ({"1": "2"}, "adaptive_tiers")):
            for route in ("/check", "/switch"):
                r = await client.post(route, json={"profile": "baseline", "spec": "eagle3-adaptive",
                                                   "adaptive_tiers": bad}, headers=AUTH)
                assert r.status == 400 and words in (await r.json())["error"], (route, bad)
        r = await client.post("/switch", json={"profile": "baseline", "spec": "eagle3", "adaptive_tiers": {"1": [2]}},
                              headers=AUTH)
        assert r.status == 400 and "eagle3-adaptive only" in (await r.json())["error"]
        assert sup.stops == 0 and not (tmp_path / "adaptive").exists()
        tiers = {"1": [2], "4": [1], "16": [0]}
        r = await client.post("/check", json={"profile": "baseline", "spec": "eagle3-adaptive", "adaptive_tiers": tiers},
                              headers=AUTH)
        checked = await r.json()
        assert r.status == 200 and checked["plan"]["adaptive_tiers"] == tiers
        r = await client.post("/switch", json={"profile": "baseline", "spec": "eagle3-adaptive", "adaptive_tiers": tiers},
                              headers=AUTH)
        data = await r.json()
        # the fake server logs no start-up lines, so the expected backend (spec-adaptive) is never seen and the switch
        # rolls back; the plan it ran is the one asked for (the stand-in tune test, test_bench_tune_runner_adaptive.py,
        # switches to one for real)
        assert r.status == 200 and data["outcome"] in ("switched", "rolled_back"), data.get("error")
        assert data["to"]["adaptive_tiers"] == tiers and data["to"]["digest"] == checked["digest"]
        written = list((tmp_path / "adaptive").glob("*.json"))
        assert [json.loads(p.read_text()) for p in written] == [{"1": {"candidate_steps": [2]}, "4": {
            "candidate_steps": [1]}, "16": {"candidate_steps": [0]}}]

    api(tmp_path, body)


def _strict(text: str) -> object:
    """JSON as every client parses it: NaN and Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"{name} in a JSON answer")

    return json.loads(text, parse_constant=refuse)


def test_no_answer_carries_nan_or_infinity(tmp_path):
    async def body(client, lc, sup, server):
        # a number that went wrong anywhere (a log line's "nan", a float that overflowed) answers null
        lc.backends = [{"name": "pcie-ipc", "active": True, "ema": float("nan"), "at": [float("inf"), 1.5]}]
        r = await client.get("/status")
        st = _strict(await r.text())
        assert r.status == 200 and st["backends"] == [{"name": "pcie-ipc", "active": True, "ema": None, "at": [None, 1.5]}]

    api(tmp_path, body)


def test_an_unexpected_error_is_a_json_500_even_when_the_log_is_gone(tmp_path, monkeypatch):
    """supervisord dead: the control API's stderr is a broken pipe. Logging the traceback must not turn the
    answer into aiohttp's plain-text 500 (it did: BrokenPipeError from print_exc inside the middleware)."""
    class Broken:
        def write(self, _text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    async def body(client, lc, sup, server):
        def boom():
            raise ConnectionRefusedError(111, "Connection refused")

        lc.status = boom
        monkeypatch.setattr("sys.stderr", Broken())
        r = await client.get("/status")
        monkeypatch.undo()
        assert r.status == 500 and r.content_type == "application/json"
        assert await r.json() == {"error": "internal error: ConnectionRefusedError"}

    api(tmp_path, body)


def test_supervisord_gone_mid_switch_answers_interrupted_as_json(tmp_path):
    async def body(client, lc, sup, server):
        def gone(_sup):
            if lc.switcher.phase == "health" or lc.state == "failed":
                raise switch_mod.SupervisorGone("supervisord stopped answering on s.sock (connection refused)")

        sup.on_info = gone
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off"}, headers=AUTH)
        data = await r.json()
        assert r.status == 500 and data["outcome"] == "interrupted" and data["interrupted_phase"] == "health"
        assert "supervisord stopped answering" in data["error"] and data["status"]["state"] == "failed"

    api(tmp_path, body)


STATUS_KEYS = {"profile", "spec", "spec_params", "digest", "state", "phase", "since", "since_iso", "health",
               "health_age_s", "restarts", "retry", "pid", "server_url", "last_error", "patch_check", "backends",
               "decode_allreduce", "spec_adaptive", "history", "history_skipped", "switches", "build", "tune_hold",
               "events"}


def test_every_state_move_of_a_switch_is_one_log_line_and_one_event_in_status(tmp_path, capsys):
    async def body(client, lc, sup, server):
        r = await client.post("/switch", json={"profile": "nccl-tuned", "spec": "off"}, headers=AUTH)
        assert r.status == 200 and (await r.json())["outcome"] == "switched"
        r = await client.get("/status")
        return await r.json()

    data = api(tmp_path, body)
    assert set(data) == STATUS_KEYS  # the wire's keys: the ones /status always had, and `events`
    moves = [(e["from"], e["to"]) for e in data["events"]]
    assert moves == [("starting", "serving"), ("serving", "switching"), ("switching", "serving")]
    assert data["events"][1]["why"] == "switch to nccl-tuned + off" and data["events"][2]["why"] == "switch switched"
    assert all(a["at"] <= b["at"] for a, b in zip(data["events"], data["events"][1:], strict=False))
    err = capsys.readouterr().err
    for frm, to in moves:
        assert err.count(f"state {frm} -> {to}: ") == 1, err
    # the body parses as the client reads it, and writes back the same JSON
    st = ServerStatus.model_validate(data)
    assert st.state == State.SERVING and [e.to for e in st.events] == [State.SERVING, State.SWITCHING, State.SERVING]
    assert st.history[-1].outcome == Outcome.SWITCHED and st.history[-1].to.profile == "nccl-tuned"
    assert st.to_json() == data


def test_the_events_kept_are_bounded_and_status_reads_what_it_cannot_parse_as_none(tmp_path):
    async def body(client, lc, sup, server):
        for _ in range(transitions.EVENTS_KEPT):  # serving <-> down, past the cap
            lc.set_state(State.DOWN, "test: down")
            lc.set_state(State.SERVING, "test: up")
        r = await client.get("/status")
        return await r.json()

    data = api(tmp_path, body)
    assert len(data["events"]) == transitions.EVENTS_KEPT and data["events"][-1]["why"] == "test: up"
    odd = ServerStatus.model_validate({**data, "events": [{"at": "x"}, *data["events"][:1]], "history": ["junk", {"id": 5}]})
    assert len(odd.events) == 1 and odd.history == []  # what does not read is left out, never a failed status
    assert ServerStatus.model_validate({"state": "serving"}).events == []  # an older server: no events


def test_the_docs_status_row_names_every_key_of_the_status_model():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[4] / "docs" / "switching.md").read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| `GET /status` |")]
    keys = {f.alias or name for name, f in ServerStatus.model_fields.items()}
    assert keys == STATUS_KEYS and [k for k in sorted(keys) if f"`{k}`" not in row] == []
