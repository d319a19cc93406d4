"""The drain waits for what runs: a /metrics that is slow or fails while a request streams is asked
again (real supervisord, control API and stand-in). A profile without /metrics is refused by the rule
metrics_needed_by_drain (tests/launcher/profiles/rules/test_metrics.py)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.stack  # every test here starts a process

TOKENS, DECODE_MS = 400, 25  # a 10 s stream: still running when the switch, validated beforehand, drains
LOADED_START_S = 120  # a loaded host can take more than the stack's 30 s to start; the start is not under test here


def _start(kit_stack, **extra_env: str):
    return kit_stack("baseline", "off", extra_env=extra_env, start=False).start(timeout=LOADED_START_S)


def _checked(stack, profile: str) -> None:
    """POST /check first: the control API builds and caches SGLang's parser, so the switch's own
    validation is quick and its drain begins while the stream runs."""
    stack.check(profile)


def _stream(stack, out: dict, streaming: threading.Event) -> None:
    with httpx.stream(
        "POST", f"{stack.server_url}/generate",
        json={"text": "hello", "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0}, "stream": True},
        timeout=60,
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:"):
                out["lines"].append(line)
                streaming.set()


@pytest.mark.parametrize("fault", [{}, {"STANDIN_METRICS_BUSY_DELAY_S": "6"}, {"STANDIN_METRICS_BUSY_STATUS": "503"}],
                         ids=["metrics", "slow-metrics", "metrics-503"])
def test_drain_waits_for_the_running_request_whatever_metrics_answers(kit_stack, fault):
    """/metrics counts the request, or answers after 6 s (the drain reads for 5 s), or 503 while the
    request runs: the old drain took the last two for 'nothing runs' and the stop cut the stream off."""
    stack = _start(kit_stack, STANDIN_DECODE_MS=str(DECODE_MS), **fault)
    _checked(stack, "nccl-tuned")
    out: dict = {"lines": []}
    streaming = threading.Event()
    t = threading.Thread(target=_stream, args=(stack, out, streaming), daemon=True)
    t0 = time.monotonic()
    t.start()
    assert streaming.wait(15), "the stream never started"
    assert len(out["lines"]) < TOKENS // 2  # switched while most of it is still to come
    r = stack.switch("nccl-tuned", "off")
    t.join(60)
    body = r.json()
    assert body["outcome"] == "switched", body
    assert out["lines"][-1] == "data: [DONE]"  # the request in flight finished, not cut off
    assert time.monotonic() - t0 >= TOKENS * DECODE_MS / 1000  # the switch waited for it
    assert "drain_cut_short" not in body
    assert stack.history()[-1]["durations"]["drain_s"] > 1


def test_a_drain_cut_short_by_its_deadline_aborts_and_is_recorded(kit_stack):
    stack = _start(kit_stack, STANDIN_DECODE_MS="50", KIT_DRAIN_TIMEOUT_S="1", STANDIN_METRICS_BUSY_STATUS="503")
    _checked(stack, "nccl-tuned")
    out: dict = {"lines": []}
    streaming = threading.Event()
    t = threading.Thread(target=_stream, args=(stack, out, streaming), daemon=True)
    t.start()
    assert streaming.wait(15)
    pid = stack.debug_env()["pid"]
    body = stack.switch("nccl-tuned", "off").json()
    t.join(60)
    assert body["outcome"] == "aborted" and body["error"].startswith("drain timeout"), body
    assert body["drain_cut_short"] == "/metrics answered 503"
    assert stack.history()[-1]["drain_cut_short"] == "/metrics answered 503"
    assert out["lines"][-1] == "data: [DONE]" and stack.debug_env()["pid"] == pid  # nothing was touched
    assert stack.status()["state"] == "serving"
