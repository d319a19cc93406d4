"""launcher.profiles.pcie_workspace: SGLang 0.5.23's capture list and tier routing, the fit of each adaptive tier's
widest verify in the PCIe-IPC workspace the starting point builds, the fixes it offers; and rule
`pcie_ipc_adaptive_tiers` through `launcher check` / `launcher show` (exit 2) and the control API (HTTP 400).
The rule's level and message cases are in tests/launcher/profiles/rules/test_allreduce.py."""

from __future__ import annotations

import pytest
from helpers_profiles import ENV, child_env, run_launcher
from helpers_rules import PCIE
from helpers_runtime import AUTH, TOKEN, control_app, env

from launcher.profiles import pcie_workspace as pw
from launcher.profiles import sglang_args
from launcher.profiles.plan import evaluate

# SGLang's speculative capture list up to 48 (cuda_graph_hook.py:519-525)
SPEC_48 = [*range(1, 9), *range(10, 33, 2), 40, 44, 48]
OVERLAY_TIERS = {1: [1, 3, 5, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}  # profiles/spec/eagle3-adaptive.json


def test_the_speculative_capture_list_is_sglangs():
    assert pw.spec_capture_sizes(48) == SPEC_48
    assert pw.spec_capture_sizes(300)[-4:] == [256, 272, 288, 300]  # max_bs appended (cuda_graph_hook.py:529-530)
    assert pw.spec_capture_sizes(5, padding=False) == [1, 2, 3, 4, 5]
    assert pw.clamp(pw.spec_capture_sizes(512), 50) == [*SPEC_48, 50]  # the pool is added (base_cuda_graph_runner:94-97)
    assert pw.clamp([1, 2, 4], 8) == [1, 2, 4]


def test_every_batch_routes_by_its_own_size_and_verifies_padded_to_a_captured_size():
    """Without --cuda-graph-bs-decode the router pads nothing (eagle_worker_v2.py:1408-1414): batch b goes to the
    largest tier at or below b (the lowest below its key); its verify runs in the graph captured at or above b."""
    fit = pw.fit({4: [1], 25: [3], 31: [1]}, 1, SPEC_48)
    assert [(t.tier, t.first, t.last, t.graph, t.rows) for t in fit.tiers] == [
        (4, 1, 24, 24, 48), (25, 25, 30, 30, 120), (31, 31, 48, 48, 96)]
    assert fit.workspace_rows == 96 and fit.widest.tier == 25 and [t.tier for t in fit.overflows] == [25]
    fit = pw.fit({1: [1], 8: [3], 32: [1]}, 1, SPEC_48)  # batch 31 pads to the graph of 32
    assert [(t.tier, t.last, t.graph, t.rows) for t in fit.overflows] == [(8, 31, 32, 128)]


def test_with_a_router_list_a_tier_no_padded_batch_reaches_is_left_out():
    """With --cuda-graph-bs-decode the router pads to that list first: batches 17-32 pad to 32, tier 24's, so tier 20
    never runs; without the list, batches 20-23 run it (padded to the graph of 24)."""
    tiers, captured = {1: [1], 20: [7], 24: [1]}, [1, 2, 4, 8, 16, 24, 32]
    routed = pw.fit(tiers, 1, captured, router=[1, 2, 4, 8, 16, 32])
    assert [t.tier for t in routed.tiers] == [1, 24] and routed.overflows == ()
    assert [(t.tier, t.first, t.last, t.graph, t.rows) for t in pw.fit(tiers, 1, captured).overflows] == [
        (20, 20, 23, 24, 192)]


def test_the_overlay_tiers_fit_from_their_start_and_overflow_from_step_1():
    assert pw.fit(OVERLAY_TIERS, 3, SPEC_48).overflows == ()
    fit = pw.fit(OVERLAY_TIERS, 1, SPEC_48)
    assert [(t.tier, t.last, t.graph, t.rows) for t in fit.overflows] == [(8, 31, 32, 128)]
    assert pw.fixes(OVERLAY_TIERS, 1, SPEC_48) == pw.Fixes(start_steps=3, max_requests=None, numel_rows=128)
    assert pw.fixes({1: [1], 25: [3]}, 1, SPEC_48) == pw.Fixes(start_steps=3, max_requests=24, numel_rows=192)


def test_plan_fit_reads_the_plans_start_pool_and_tiers(monkeypatch):
    """plan_fit on the Context the plan's rules get: the start, the 48-request pool, the overlay's file or the tuned
    record; None without PCIe-IPC."""
    from launcher.profiles import rules

    seen: list[pw.PlanFit | None] = []

    def probe(ctx):
        seen.append(pw.plan_fit(ctx))
        return iter(())

    monkeypatch.setattr(rules, "RULES", [*rules.RULES, (probe, False)])
    evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV)
    evaluate("custom-ar", "eagle3-adaptive", PCIE, environ=ENV, adaptive_tiers="1:2,16:4")
    evaluate("baseline", "eagle3-adaptive", PCIE, environ=ENV)
    stock, tuned, baseline = seen
    assert baseline is None
    assert (stock.fit.start_steps, stock.fit.max_batch, stock.fit.workspace_rows) == (3, 48, 192)
    assert stock.tiers_source.endswith("eagle3-adaptive.json") and stock.fit.widest.rows == 128
    # tuned tiers under PCIe-IPC start from their widest tier's steps (4): 48 x 5 = 240 rows hold it
    assert (tuned.fit.start_steps, tuned.fit.workspace_rows, tuned.fit.widest.rows) == (4, 240, 240)
    assert tuned.tiers_source == "the tuned tiers" and not tuned.fit.overflows


# ---- through the CLI and the control API ----------------------------------------------------------------------------


@pytest.mark.stack
def test_launcher_check_and_show_refuse_an_overflowing_adaptive_plan_with_exit_2(tmp_path):
    env = child_env(KIT_PATCH_CHECK="skip", KIT_STATE_DIR=str(tmp_path / "state"))
    check = run_launcher("check", "custom-ar", "--spec", "eagle3-adaptive", "--spec-params", "1,1,2", env=env)
    assert check.returncode == 2, check.stdout + check.stderr
    assert "FAIL  custom-ar + eagle3-adaptive" in check.stdout
    assert "--spec-params 1,1,2: adaptive tier 8" in check.stdout and "32 x 4 = 128 rows" in check.stdout
    tuned = run_launcher("check", "custom-ar", "--spec", "eagle3-adaptive", "--adaptive-tiers", "1:1,25:3,31:1",
                         "--spec-params", "1,1,2", env=env)
    assert tuned.returncode == 2 and "adaptive tier 25 (the tuned tiers)" in tuned.stdout, tuned.stdout + tuned.stderr
    show = run_launcher("show", "custom-ar", "--spec", "eagle3-adaptive", "--spec-params", "1,1,2", env=env)
    assert show.returncode == 2 and "Traceback" not in show.stderr and "adaptive tier 8" in show.stderr, show.stderr
    ok = run_launcher("check", "custom-ar", "baseline", "--spec", "eagle3-adaptive", "--spec-params", "3,1,4", env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok    custom-ar + eagle3-adaptive" in ok.stdout and "adaptive tier" not in ok.stdout
    other = run_launcher("check", "baseline", "--spec", "eagle3-adaptive", "--spec-params", "1,1,2", env=env)
    assert other.returncode == 0 and "adaptive tier" not in other.stdout, other.stdout + other.stderr


def test_check_and_switch_answer_400_for_an_overflowing_adaptive_plan(tmp_path, monkeypatch):
    env(monkeypatch)
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(sglang_args, "available", lambda: False)  # SGLang's parser takes seconds to build
    low = {"steps": 1, "topk": 1, "draft_tokens": 2}

    async def body(client, lc, sup, _server):
        for route in ("/check", "/switch"):
            for extra in ({"spec_params": low}, {"adaptive_tiers": {"1": [1], "25": [3], "31": [1]}, "spec_params": low}):
                r = await client.post(route, json={"profile": "custom-ar", "spec": "eagle3-adaptive", **extra},
                                      headers=AUTH)
                error = (await r.json())["error"]
                assert r.status == 400 and "adaptive tier" in error and "PCIe-IPC workspace" in error, (route, error)
        r = await client.post("/check", json={"profile": "custom-ar", "spec": "eagle3-adaptive",
                                              "spec_params": {"steps": 3, "topk": 1, "draft_tokens": 4}},
                              headers=AUTH)
        assert r.status == 200, await r.text()
        assert sup.stops == 0 and lc.current.name == "baseline"

    control_app(tmp_path, TOKEN, body)


@pytest.mark.parametrize("profile", ["baseline", "nccl-tuned"])
def test_plans_without_pcie_ipc_have_no_fit(profile):
    _, findings = evaluate(profile, "eagle3-adaptive", PCIE, environ=ENV, spec_params="1,1,2")
    assert [f for f in findings if f.rule == "pcie_ipc_adaptive_tiers"] == []
