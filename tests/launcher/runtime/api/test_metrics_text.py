"""launcher.runtime.api.metrics_text: SGLang's /metrics summed over label sets, and text that is not Prometheus format."""

from __future__ import annotations

import pytest

from launcher.runtime.api.metrics_text import RUNNING_REQS, running_requests, sample_sums


def test_sample_sums_sums_label_sets():
    text = (
        "# HELP x\n"
        'sglang:spec_verify_calls_total{model_name="m",tp_rank="0"} 10.0\n'
        'sglang:spec_verify_calls_total{model_name="m",tp_rank="1"} 5.0\n'
        "sglang:generation_tokens_total 30\n"
    )
    m = sample_sums(text)
    assert m["sglang:spec_verify_calls_total"] == 15.0
    assert m["sglang:generation_tokens_total"] == 30.0
    assert set(m) == {"sglang:spec_verify_calls_total", "sglang:generation_tokens_total"}


def test_typed_counter_keeps_its_sample_name():
    text = (
        "# HELP sglang:spec_verify_calls_total Verify passes.\n"
        "# TYPE sglang:spec_verify_calls_total counter\n"
        'sglang:spec_verify_calls_total{tp_rank="0"} 10.0\n'
        'sglang:spec_verify_calls_total{tp_rank="1"} 5.0\n'
    )
    assert sample_sums(text) == {"sglang:spec_verify_calls_total": 15.0}


def test_running_requests_sums_labelled_series_and_ignores_comments():
    text = (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        f'{RUNNING_REQS}{{tp_rank="0"}} 2.0\n'
        f'{RUNNING_REQS}{{tp_rank="1"}} 1.0\n'
        'sglang:num_queue_reqs{tp_rank="0"} 5.0\n'
    )
    assert running_requests(text) == 3.0
    assert running_requests("") == 0.0
    assert running_requests('sglang:num_queue_reqs{tp_rank="0"} 5.0\n') == 0.0  # absent: none running


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>\n",
        'sglang:num_running_reqs{tp_rank="0" 2.0\n',  # unclosed label set
        'sglang:num_running_reqs{tp_rank="0"} two\n',  # value not a number
    ],
)
def test_malformed_text_raises_value_error(text):
    with pytest.raises(ValueError):
        sample_sums(text)
    with pytest.raises(ValueError):
        running_requests(text)
