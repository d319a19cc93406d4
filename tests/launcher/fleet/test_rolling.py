"""launcher/fleet/rolling.py (with router.py and cli.py): three `launcher serve` stacks over the stand-in
behind a real sglang-router that `launcher fleet router` starts; a rolling switch under load, a host
whose new profile fails, what `launcher fleet status` shows, and an EAGLE-3 point (`--spec-params`) or
tuned adaptive tiers (`--adaptive-tiers`) rolled through the fleet."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from launcher.fleet import rolling
from launcher.profiles import adaptive_tiers as at
from launcher.profiles.plan import Plan
from launcher.profiles.spec_params import SpecParams
from testsupport.stack import FleetStack, start_all


@pytest.fixture
def fleet(kit_stack, tmp_path):
    stacks = start_all([kit_stack("baseline", "off", start=False) for _ in range(3)])
    (tmp_path / "fleet").mkdir()
    f = FleetStack(tmp_path / "fleet", stacks)
    f.start()
    yield f
    f.stop()


class Load:
    """A bounded loop of requests through the router, counted by outcome, while something else runs."""

    def __init__(self, url: str):
        self.url, self.ok, self.failed, self.errors = url, 0, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with httpx.Client(timeout=60) as c:
            while not self.stop.is_set():
                try:
                    r = c.post(f"{self.url}/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 8}})
                    if r.status_code == 200:
                        self.ok += 1
                    else:
                        self.failed += 1
                        self.errors.append(f"{r.status_code} {r.text[:120]}")
                except httpx.HTTPError as exc:
                    self.failed += 1
                    self.errors.append(repr(exc))

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=90)

    def served_at_least(self, n: int, timeout: float = 60) -> int:
        """Wait until `n` requests have been served (polling the count); return the count then."""
        deadline = time.monotonic() + timeout
        while self.ok < n:
            assert time.monotonic() < deadline, f"only {self.ok} of {n} requests served in {timeout} s: {self.errors[:3]}"
            assert self.thread.is_alive(), "the load loop ended"
            time.sleep(0.02)
        return self.ok


@pytest.mark.stack
def test_rolling_switch_under_load_fails_no_request_and_moves_every_host(fleet):
    with Load(fleet.url) as load:
        before = load.served_at_least(10)  # the load runs through the router before the switch starts
        proc = fleet.cli("switch", "nccl-tuned", "--spec", "off")
        during = load.ok - before
        load.served_at_least(load.ok + 10)  # and still runs after it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load.failed == 0, load.errors[:5]
    assert during > 0  # requests were served while hosts switched
    for s in fleet.stacks:
        st = s.status()
        assert (st["profile"], st["spec"], st["state"]) == ("nccl-tuned", "off", "serving")
    workers = httpx.get(f"{fleet.url}/workers", timeout=5).json()["workers"]
    assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted(s.server_url for s in fleet.stacks)
    history = [json.loads(line) for line in (fleet.file.with_name("fleet.history.jsonl")).read_text().splitlines()]
    steps = [(h["host"], h["step"]) for h in history]
    for i in range(3):  # out of the router before the switch, back after it, one host at a time
        host = f"host-{i}"
        assert steps.index((host, "removed_from_router")) < steps.index((host, "switched")) < steps.index((host, "back_in_router"))
        if i:
            assert steps.index((f"host-{i - 1}", "back_in_router")) < steps.index((host, "removed_from_router"))
    status = fleet.cli("status", "--json")
    report = json.loads(status.stdout)
    assert status.returncode == 0 and [h["profile"] for h in report["hosts"]] == ["nccl-tuned"] * 3
    assert all(h["router"] == {"listed": True, "healthy": True} for h in report["hosts"])


@pytest.mark.stack
def test_a_host_whose_profile_fails_rolls_back_and_stops_the_fleet(fleet):
    proc = fleet.cli("switch", "crashy", "--spec", "off")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "host-0: switch rolled_back" in proc.stdout and "host-1, host-2 left on their current plan" in proc.stdout
    for s in fleet.stacks:  # host-0 rolled back; the others were never touched
        st = s.status()
        assert (st["profile"], st["state"]) in {("baseline", "serving"), ("baseline", "rolled_back")}, st
    assert fleet.stacks[1].history()[-1]["outcome"] == "started"
    workers = httpx.get(f"{fleet.url}/workers", timeout=5).json()["workers"]
    assert len([w for w in workers if w["is_healthy"]]) == 3  # the rolled-back host serves again


@pytest.mark.stack
def test_status_names_a_host_whose_control_api_is_down(fleet):
    fleet.stacks[2].stop()
    proc = fleet.cli("status")
    assert proc.returncode == 1
    assert "host-2" in proc.stdout and "unreachable" in proc.stdout


def _bench(fleet, tmp_path, *args: str):
    import subprocess
    import sys

    from helpers_profiles import REPO

    return subprocess.run(
        [sys.executable, "-m", "bench", "run", "--repeats", "1", "--num-prompts", "4", "--max-tokens", "16",
         "--warmup", "0", "--out", str(tmp_path / "results"), *args],
        # 4 prompts x 16 tokens, under the gate's default minimum of 200: these tests look at the fleet, not the gate
        cwd=REPO, env={**fleet.env, "KIT_GATE_MIN_TOKENS": "32"}, capture_output=True, text=True, timeout=600,
    )


@pytest.mark.stack
def test_bench_measures_each_host_labelled_or_the_fleet_through_the_router(fleet, tmp_path):
    proc = _bench(fleet, tmp_path, "--fleet", str(fleet.file), "--profiles", "baseline", "--spec", "off")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i in range(3):
        [manifest] = (tmp_path / "results" / f"host-{i}").glob("*/manifest.json")
        data = json.loads(manifest.read_text())
        assert data["settings"]["fleet_host"] == f"host-{i}" and data["settings"]["url"] == fleet.stacks[i].server_url
        assert f"fleet host host-{i}" in (manifest.parent / "summary.md").read_text()
    whole = _bench(fleet, tmp_path, "--url", fleet.url, "--no-switch", "--profiles", "baseline", "--spec", "off")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "bench bundle" in whole.stdout


@pytest.mark.stack
def test_a_single_host_gives_clients_503_not_500_while_it_switches(kit_stack, tmp_path):
    """Removed before it stops: the router answers no_available_workers at once, never a closed-port 500."""
    (tmp_path / "one").mkdir()
    one = FleetStack(tmp_path / "one", [kit_stack("baseline", "off", {"STANDIN_STARTUP_DELAY_S": "2"})]).start()
    try:
        with Load(one.url) as load:
            before = load.served_at_least(3)  # served before the switch
            proc = one.cli("switch", "nccl-tuned", "--spec", "off")
            after = load.served_at_least(load.ok + 3)  # and after it
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert after > before and load.failed > 0  # refused while it restarted
        assert all(e.startswith("503") and "no_available_workers" in e for e in load.errors), load.errors[:3]
    finally:
        one.stop()


POINT = {"steps": 1, "topk": 1, "draft_tokens": 2}


def _plan(stack) -> dict:
    return httpx.get(f"{stack.control_url}/plan", timeout=5).json()["plan"]


def _history(fleet) -> list[dict]:
    path = fleet.file.with_name("fleet.history.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def pair(kit_stack, tmp_path):
    """Two hosts behind the router, both on baseline + eagle3 (the overlay's point, 3,1,4)."""
    (tmp_path / "pair").mkdir()
    f = FleetStack(tmp_path / "pair", start_all([kit_stack("baseline", "eagle3", start=False) for _ in range(2)])).start()
    yield f
    f.stop()


@pytest.mark.stack
def test_a_point_reaches_every_host_and_the_history(fleet):
    proc = fleet.cli("switch", "baseline", "--spec", "eagle3", "--spec-params", "1,1,2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fleet on baseline+eagle3(1,1,2): 3 host(s)" in proc.stdout
    for s in fleet.stacks:
        plan = _plan(s)
        assert (plan["name"], plan["spec"], plan["spec_params"]) == ("baseline", "eagle3", POINT)
        info = httpx.get(f"{s.server_url}/server_info", timeout=5).json()  # the server runs it, not just the plan
        assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (1, 2)
        assert s.status()["state"] == "serving"
    history = _history(fleet)
    assert history and all(h["spec_params"] == POINT for h in history)
    assert [h["host"] for h in history if h["step"] == "switched" and h["outcome"] == "switched"] == ["host-0", "host-1", "host-2"]
    report = json.loads(fleet.cli("status", "--json").stdout)
    assert [h["spec_params"] for h in report["hosts"]] == [POINT] * 3
    assert all(h["router"] == {"listed": True, "healthy": True} for h in report["hosts"])
    assert "baseline + eagle3(1,1,2) serving" in fleet.cli("status").stdout


@pytest.mark.stack
def test_a_host_on_the_plan_but_another_point_is_switched_one_on_the_point_skipped(pair):
    on_point, other = pair.stacks
    assert on_point.switch("baseline", "eagle3", spec_params=POINT).json()["outcome"] == "switched"
    assert _plan(other)["spec_params"] == {"steps": 3, "topk": 1, "draft_tokens": 4}
    pids = [s.status()["pid"] for s in pair.stacks]

    proc = pair.cli("switch", "baseline", "--spec", "eagle3", "--spec-params", "1,1,2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "host-0: already on baseline+eagle3(1,1,2)" in proc.stdout
    assert "host-1: on baseline+eagle3(1,1,2), back in the router" in proc.stdout
    assert [_plan(s)["spec_params"] for s in pair.stacks] == [POINT, POINT]
    after = [s.status()["pid"] for s in pair.stacks]
    assert after[0] == pids[0] and after[1] != pids[1]  # only host-1 restarted
    steps = [(h["host"], h["step"]) for h in _history(pair)]
    assert ("host-0", "skipped") in steps and ("host-0", "removed_from_router") not in steps
    assert ("host-1", "removed_from_router") in steps and ("host-1", "back_in_router") in steps

    # Without a point, profile + spec is the plan: both hosts are on it whatever point they run.
    again = pair.cli("switch", "baseline", "--spec", "eagle3")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "host-0: already on baseline+eagle3" in again.stdout and "host-1: already on baseline+eagle3" in again.stdout
    assert [s.status()["pid"] for s in pair.stacks] == after  # neither restarted
    workers = httpx.get(f"{pair.url}/workers", timeout=5).json()["workers"]
    assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted(s.server_url for s in pair.stacks)


@pytest.mark.stack
def test_a_bad_spec_params_exits_2_naming_the_flag_with_nothing_switched(pair):
    before = [(s.status()["pid"], _plan(s)["digest"]) for s in pair.stacks]
    for text in ("1,1", "a,b,c", "0,1,1", "1,1,2,3", "3,1,2", ""):  # "3,1,2": SGLang would run 3,1,4 instead
        proc = pair.cli("switch", "baseline", "--spec", "eagle3", "--spec-params", text)
        assert proc.returncode == 2, (text, proc.stdout + proc.stderr)
        assert f"--spec-params '{text}'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert _history(pair) == []  # not even a `begin`: no host was touched
    assert [(s.status()["pid"], _plan(s)["digest"]) for s in pair.stacks] == before
    assert all(s.status()["state"] == "serving" for s in pair.stacks)
    workers = httpx.get(f"{pair.url}/workers", timeout=5).json()["workers"]
    assert len([w for w in workers if w["is_healthy"]]) == 2


@pytest.mark.stack
def test_a_point_for_a_spec_mode_without_eagle_stops_at_the_first_host_which_goes_back(pair):
    """Whether the spec mode runs EAGLE is the host's to say (its overlays): 400 from its control API,
    its server untouched, back in the router; the run stops there."""
    before = [s.status()["pid"] for s in pair.stacks]
    proc = pair.cli("switch", "baseline", "--spec", "off", "--spec-params", "1,1,2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "host-0: switch failed" in proc.stdout and "EAGLE-3 only" in proc.stdout, proc.stdout
    assert "host-1 left on their current plan" in proc.stdout
    assert [s.status()["pid"] for s in pair.stacks] == before
    assert [_plan(s)["spec"] for s in pair.stacks] == ["eagle3", "eagle3"]
    steps = [(h["host"], h["step"]) for h in _history(pair)]
    assert ("host-0", "restored_to_router") in steps and not [s for s in steps if s[0] == "host-1"]
    workers = httpx.get(f"{pair.url}/workers", timeout=5).json()["workers"]
    assert len([w for w in workers if w["is_healthy"]]) == 2


# ---- a tuned adaptive config -------------------------------------------------------------------------

TIERS = {"1": [1], "4": [0]}


def test_a_target_with_tiers_is_eagle3_adaptive_only_and_a_plan_runs_it_only_with_those_tiers():
    tiers = at.parse("1:1,4:0")
    target = rolling.Target("fused", "eagle3-adaptive", None, tiers)
    assert target.problems() == [] and target.label() == "fused+eagle3-adaptive[1:1,4:0]"
    assert target.record() == {"profile": "fused", "spec": "eagle3-adaptive", "spec_params": None, "adaptive_tiers": TIERS}
    plan = Plan.model_construct(name="fused", spec="eagle3-adaptive",  # GET /plan's plan: only what run_by reads
                                spec_params=SpecParams(steps=1, topk=1, draft_tokens=2), adaptive_tiers=tiers)

    def but(**change):
        return plan.model_copy(update=change)

    assert target.run_by(plan)
    assert not target.run_by(but(adaptive_tiers=at.parse("1:1,4:1")))
    assert not target.run_by(but(adaptive_tiers=None)) and not target.run_by(but(name="baseline"))
    assert not target.run_by(None)  # no plan rendered yet
    assert rolling.Target("fused", "eagle3-adaptive").run_by(but(adaptive_tiers=None))  # none asked: any
    wrong = rolling.Target("fused", "eagle3", None, tiers).problems()
    assert wrong and "eagle3-adaptive only" in wrong[0] and "--spec eagle3-adaptive" in wrong[0]
    both = rolling.Target("fused", "eagle3-adaptive", SpecParams(steps=1, topk=1, draft_tokens=2), tiers)
    assert both.label() == "fused+eagle3-adaptive(1,1,2)[1:1,4:0]" and both.run_by(plan)


@pytest.mark.stack
def test_tuned_tiers_reach_every_host_and_a_host_on_them_is_skipped(pair):
    before = [(s.status()["pid"], _plan(s)["digest"]) for s in pair.stacks]
    for args, words in ((("--spec", "eagle3", "--adaptive-tiers", "1:1,4:0"), "eagle3-adaptive only"),
                        (("--spec", "eagle3-adaptive", "--adaptive-tiers", "1:x"), "--adaptive-tiers")):
        proc = pair.cli("switch", "baseline", *args)
        assert proc.returncode == 2, (args, proc.stdout + proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert _history(pair) == []  # no host touched
    assert [(s.status()["pid"], _plan(s)["digest"]) for s in pair.stacks] == before

    proc = pair.cli("switch", "baseline", "--spec", "eagle3-adaptive", "--adaptive-tiers", "1:1,4:0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fleet on baseline+eagle3-adaptive[1:1,4:0]: 2 host(s)" in proc.stdout
    for s in pair.stacks:
        plan = _plan(s)
        assert (plan["spec"], plan["adaptive_tiers"]) == ("eagle3-adaptive", TIERS)
        assert s.status()["state"] == "serving"
    history = _history(pair)
    assert history and all(h["adaptive_tiers"] == TIERS for h in history)
    assert [h["host"] for h in history if h["step"] == "switched" and h["outcome"] == "switched"] == ["host-0", "host-1"]

    pids = [s.status()["pid"] for s in pair.stacks]
    again = pair.cli("switch", "baseline", "--spec", "eagle3-adaptive", "--adaptive-tiers", "1:1,4:0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(f"host-{i}: already on baseline+eagle3-adaptive[1:1,4:0]" in again.stdout for i in (0, 1))
    assert [s.status()["pid"] for s in pair.stacks] == pids  # neither restarted
