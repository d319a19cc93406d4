"""Adaptive EAGLE (--speculative-adaptive) read from SGLang 0.5.23's log lines: whether it runs or fell back
(the `spec-adaptive` backend verdict), and what it chose (/status `spec_adaptive`, /metrics kit_spec_adaptive_*).

The lines are SGLang's own f-strings: "AdaptiveSpeculativeParams initialized: steps=…, candidate_steps=[…]"
(adaptive_spec_params.py:297-303), "speculative_adaptive disabled: <reason>. Falling back to static
speculative params." (arg_groups/speculative_hook.py:1379-1384), "Adaptive spec params updated: steps X -> Y
(ema_accept_len=E)" (adaptive_spec_params.py:263-270)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers_profiles import ENV
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from launcher.profiles import plan as plans
from launcher.runtime import activation, start_lines
from launcher.runtime.api.metrics import KitCollector
from launcher.runtime.process.server_exec import START_MARKER
from testsupport.standin import activation as standin
from testsupport.standin.server_args import parse_server_argv

INIT = "[2026-12-03 10:00:01 TP0] AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]"
OFF = ("[2026-12-03 10:00:00] speculative_adaptive disabled: speculative_eagle_topk=2 (only topk=1 is supported). "
       "Falling back to static speculative params.")
UPDATE = "[2026-12-03 10:00:{s:02d} TP0] Adaptive spec params updated: steps {a} -> {b} (ema_accept_len={e})"


def _plan(spec="eagle3-adaptive", tp="2"):
    return plans.build_plan("baseline", spec, environ={**ENV, "KIT_TP_SIZE": tp})


def _record(plan, lines):
    marker = f"{START_MARKER}{plan.name} spec {plan.spec} digest {plan.digest()} pid 42 start 1: x"
    (record,) = start_lines.scan("\n".join([marker, *lines]))
    return record


def _adaptive(statuses):
    return [s for s in statuses if s["name"] == activation.ADAPTIVE]


# ---- the lines -----------------------------------------------------------------------------------


def test_the_lines_parse():
    assert start_lines.adaptive_init(INIT) == (3, [1, 3, 5, 7])
    assert start_lines.adaptive_init("AdaptiveSpeculativeParams initialized: steps=0, candidate_steps=[0]") == (0, [0])
    assert start_lines.adaptive_reason(OFF) == "speculative_eagle_topk=2 (only topk=1 is supported)"
    assert start_lines.adaptive_reason("speculative_adaptive disabled: attention DP is not supported (adaptive tier "
                                       "decisions are not synchronized across DP ranks). Falling back to static "
                                       "speculative params.").startswith("attention DP is not supported (")
    assert start_lines.adaptive_init("something else") is None and start_lines.adaptive_reason(INIT) is None


def test_the_scanner_counts_changes_and_keeps_the_last():
    plan = _plan()
    lines = [INIT, UPDATE.format(s=2, a=3, b=5, e="3.91"), "[2026-12-03 10:00:03 TP0] Decode batch ...",
             UPDATE.format(s=4, a=5, b=1, e="0.40")]
    record = _record(plan, lines)
    ad = record["adaptive"]
    assert ad["changes"] == 2 and ad["ranks"] == ["TP0"]
    assert ad["last"] == {"from": 5, "to": 1, "ema_accept_len": 0.4, "line": lines[-1]}
    assert record["seen"]["AdaptiveSpeculativeParams initialized"]["ranks"] == ["TP0"]


def test_every_adaptive_line_holds_a_search_key():
    for line in (INIT, OFF, UPDATE.format(s=1, a=1, b=3, e="2.50")):
        assert any(k in line for k in start_lines.KEYS), line


def test_a_record_fed_in_pieces_counts_the_same():
    plan = _plan()
    out: list[dict] = []
    s = start_lines.Scanner(on_start=out.append)
    s.feed(f"{START_MARKER}{plan.name} spec {plan.spec} digest {plan.digest()} pid 42 start 1: x\n{INIT}\n")
    for i in range(3):
        s.feed(UPDATE.format(s=i, a=3, b=1, e="nan") + "\n")
    assert out[0]["adaptive"]["changes"] == 3 and out[0]["adaptive"]["last"]["ema_accept_len"] is None


# ---- the verdict -----------------------------------------------------------------------------------


def test_initialized_is_active_on_rank_0_alone():
    plan = _plan(tp="4")
    statuses, _ = activation.assess(plan, _record(plan, [INIT]))
    [st] = _adaptive(statuses)
    assert (st["active"], st["verdict"]) == (True, "active")
    assert st["steps"] == 3 and st["candidate_steps"] == [1, 3, 5, 7]
    assert "adaptive_spec_params.py:297-303" in st["evidence"] and "TP rank 0 alone" in st["evidence"]
    assert activation.inactive(statuses) == []


def test_disabled_is_fell_back_with_sglangs_reason():
    plan = _plan()
    statuses, _ = activation.assess(plan, _record(plan, [OFF]))
    [st] = _adaptive(statuses)
    assert (st["active"], st["verdict"]) == (False, "fell_back")
    assert st["reason"] == "speculative_eagle_topk=2 (only topk=1 is supported)"
    assert "speculative_hook.py:1379-1384" in st["evidence"]
    assert activation.inactive(statuses) == [st] and "spec-adaptive: " in activation.summary(statuses)


def test_no_line_is_inactive_and_a_static_plan_has_no_verdict():
    plan = _plan()
    [st] = _adaptive(activation.assess(plan, _record(plan, ["[2026-12-03 10:00:01 TP0] nothing"]))[0])
    assert st["verdict"] == "inactive" and "AdaptiveSpeculativeParams initialized" in st["evidence"]
    [st] = _adaptive(activation.assess(plan, None)[0])
    assert st["verdict"] == "inactive"
    static = _plan("eagle3")
    assert _adaptive(activation.assess(static, _record(static, [INIT]))[0]) == []


def test_adaptive_state_says_what_it_chose():
    plan = _plan()
    assert activation.adaptive_state(_plan("eagle3"), None) is None
    first = activation.adaptive_state(plan, _record(plan, [INIT]))
    assert first["verdict"] == "active" and first["steps"] == 3 and first["changes"] == 0
    assert first["candidate_steps"] == [1, 3, 5, 7] and first["last_change"] is None
    later = activation.adaptive_state(plan, _record(plan, [INIT, UPDATE.format(s=2, a=3, b=0, e="0.21")]))
    assert later["steps"] == 0 and later["changes"] == 1 and later["initial_steps"] == 3
    assert later["last_change"]["ema_accept_len"] == 0.21
    off = activation.adaptive_state(plan, _record(plan, [OFF]))
    assert off["verdict"] == "fell_back" and off["steps"] is None and off["reason"].startswith("speculative_eagle_topk")


# ---- the stand-in prints lines the kit reads --------------------------------------------------------


def test_the_standins_lines_read_as_sglangs():
    plan = _plan()
    args = parse_server_argv(plan.flags)
    assert standin.adaptive_requested(args) and standin.adaptive_disabled_reason(args) is None
    assert standin.adaptive_starting_steps(args) == (3, [1, 3, 5, 7])
    record = _record(plan, [standin.adaptive_init_line(args), standin.adaptive_update_line(args, 3, 1, 0.5)])
    state = activation.adaptive_state(plan, record)
    assert (state["verdict"], state["candidate_steps"], state["steps"], state["changes"]) == ("active", [1, 3, 5, 7], 1, 1)
    forced = standin.adaptive_disabled_reason(args, "the platform serves EAGLE3 with X (only the built-in worker implements adaptive)")
    off = activation.adaptive_state(plan, _record(plan, [standin.adaptive_disabled_line(forced)]))
    assert off["verdict"] == "fell_back" and off["reason"] == forced


def test_the_standin_falls_back_where_sglang_would():
    base = _plan().flags
    for extra, words in ((["--enable-dp-attention"], "attention DP"), (["--enable-pdmux"], "enable_pdmux"),
                         (["--enable-two-batch-overlap"], "enable_two_batch_overlap"),
                         (["--enable-multi-layer-eagle"], "enable_multi_layer_eagle")):
        assert words in standin.adaptive_disabled_reason(parse_server_argv([*base, *extra])), extra
    topk = [("2" if f == "1" and base[i - 1] == "--speculative-eagle-topk" else f) for i, f in enumerate(base)]
    assert standin.adaptive_disabled_reason(parse_server_argv(topk)).startswith("speculative_eagle_topk=2")


# ---- /metrics ------------------------------------------------------------------------------------------


class _Lc:
    switcher = SimpleNamespace(server_changed_at=0.0)
    current = None
    state = "serving"
    backends: list = []
    restarts = retries = 0

    def __init__(self, state):
        self.state_ = state

    def spec_adaptive(self):
        return self.state_

    def switch_counts_now(self):
        return None

    def health_age_s(self):
        return None

    def history_view(self):
        return [], 0


def _families(state) -> dict:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(KitCollector(_Lc(state)))
    text = generate_latest(reg).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.name.startswith("kit_spec_adaptive")}


def test_metrics_show_the_steps_and_the_changes():
    plan = _plan()
    state = activation.adaptive_state(plan, _record(plan, [INIT, UPDATE.format(s=2, a=3, b=5, e="4.20"),
                                                           UPDATE.format(s=3, a=5, b=7, e="5.75")]))
    fams = _families(state)
    assert fams["kit_spec_adaptive_steps"][0].value == 7
    assert fams["kit_spec_adaptive_step_changes"][0].name == "kit_spec_adaptive_step_changes_total"
    assert fams["kit_spec_adaptive_step_changes"][0].value == 2
    assert fams["kit_spec_adaptive_ema_accept_length"][0].value == 5.75


def test_metrics_are_absent_unless_adaptive_runs():
    plan = _plan()
    assert _families(None) == {}
    assert _families(activation.adaptive_state(plan, _record(plan, [OFF]))) == {}
    fams = _families(activation.adaptive_state(plan, _record(plan, [INIT])))
    assert fams["kit_spec_adaptive_steps"][0].value == 3 and fams["kit_spec_adaptive_step_changes"][0].value == 0
    assert "kit_spec_adaptive_ema_accept_length" not in fams


# ---- end to end: launcher serve over the stand-in ------------------------------------------------------


def _until(check, timeout: float = 30.0):
    """check() until it returns something true (a condition, polled), or fail with its last value."""
    import time

    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"not reached in {timeout}s: {last}")


@pytest.mark.stack
def test_serve_shows_adaptive_running_its_changes_and_refuses_a_fallback(kit_stack):
    import httpx

    stack = kit_stack("baseline", "eagle3-adaptive", extra_env={"STANDIN_ADAPTIVE_STEPS": "1"})
    st = stack.status()
    [verdict] = _adaptive(st["backends"])
    assert (verdict["verdict"], verdict["candidate_steps"]) == ("active", [1, 3, 5, 7]), verdict
    assert st["spec_adaptive"]["steps"] == 3 and st["spec_adaptive"]["changes"] == 0
    r = httpx.post(f"{stack.server_url}/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 4}},
                   timeout=30)
    assert r.status_code == 200, r.text
    ad = _until(lambda: (s := stack.status()["spec_adaptive"]) and s["changes"] == 1 and s)
    assert ad["steps"] == 1 and ad["last_change"]["from"] == 3
    text = httpx.get(f"{stack.control_url}/metrics", timeout=5).text
    assert "kit_spec_adaptive_steps 1.0" in text and "kit_spec_adaptive_step_changes_total 1.0" in text
    # a point SGLang would run static: refused before anything stops
    r = stack.switch("baseline", "eagle3-adaptive", spec_params={"steps": 3, "topk": 2, "draft_tokens": 4})
    assert r.status_code == 400 and "only top-k 1 adapts" in r.text, r.text
    assert stack.status()["spec_adaptive"]["changes"] == 1
