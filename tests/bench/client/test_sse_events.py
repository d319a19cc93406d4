"""bench.client.sse_events: the correct-drafts histogram read from both APIs' final events, and refused when
malformed (the request fails naming the field, as for the other counts)."""

from __future__ import annotations

import pytest

from bench.client.request_record import RequestRecord
from bench.client.sse_events import MAX_BINS, MalformedEvent, StreamState


def _state() -> StreamState:
    return StreamState(RequestRecord(prompt_id="p"), 0.0, incremental_text=False)


def test_generate_reads_the_histogram_of_the_final_meta_info():
    state = _state()
    state.generate_event({"text": "a", "meta_info": {"completion_tokens": 2, "finish_reason": None}}, 0.1)
    assert state.r.spec_correct_drafts_histogram is None
    meta = {"completion_tokens": 5, "spec_verify_ct": 2, "spec_correct_drafts_histogram": [0, 1, 1, 0],
            "finish_reason": {"type": "length"}}
    state.generate_event({"text": "abcde", "meta_info": meta}, 0.2)
    assert state.r.spec_correct_drafts_histogram == [0, 1, 1, 0] and state.r.spec_verify_ct == 2


def test_chat_reads_the_histogram_of_the_sglext_chunk():
    state = _state()
    details = {"spec_verify_ct": 3, "spec_correct_drafts_histogram": [1, 2]}
    state.chat_event({"choices": [], "sglext": {"spec_tokens_details": details}}, 0.1)
    assert state.r.spec_correct_drafts_histogram == [1, 2] and state.r.spec_verify_ct == 3
    listed = _state()  # SGLang may send one entry per choice
    listed.chat_event({"choices": [], "sglext": {"spec_tokens_details": [details]}}, 0.1)
    assert listed.r.spec_correct_drafts_histogram == [1, 2]


BAD = [
    ("x", "is str, not a list"),
    ({"0": 1}, "is dict, not a list"),
    ([1, "2"], "spec_correct_drafts_histogram[1] is '2'"),
    ([1, -1], "spec_correct_drafts_histogram[1] is '-1'"),
    ([True], "spec_correct_drafts_histogram[0] is 'True'"),
    ([1.5], "spec_correct_drafts_histogram[0] is '1.5'"),
    ([1, None], "spec_correct_drafts_histogram[1] is null"),
    ([0] * (MAX_BINS + 1), f"is a list of {MAX_BINS + 1}"),
]


@pytest.mark.parametrize(("value", "needle"), BAD)
def test_a_malformed_histogram_fails_naming_the_field(value, needle):
    with pytest.raises(MalformedEvent, match="meta_info.spec_correct_drafts_histogram") as exc:
        _state().generate_event({"meta_info": {"completion_tokens": 1, "spec_correct_drafts_histogram": value}}, 0.1)
    assert needle in str(exc.value)
    with pytest.raises(MalformedEvent, match="spec_tokens_details.spec_correct_drafts_histogram"):
        _state().chat_event({"choices": [], "sglext": {"spec_tokens_details": {"spec_correct_drafts_histogram": value}}},
                            0.1)


def test_generate_reads_the_queue_time_and_refuses_a_malformed_one():
    state = _state()
    state.generate_event({"text": "a", "meta_info": {"completion_tokens": 1, "queue_time": 0.25}}, 0.1)
    assert state.r.queue_time_s == 0.25
    for bad in ("0.1", -1, True, float("inf")):
        with pytest.raises(MalformedEvent, match="meta_info.queue_time"):
            _state().generate_event({"meta_info": {"completion_tokens": 1, "queue_time": bad}}, 0.1)
