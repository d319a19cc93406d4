"""SGLang's /metrics (Prometheus text format), read with prometheus_client's own parser.

The switch's drain reads `sglang:num_running_reqs`; the bench reads counters such as
`sglang:spec_verify_calls_total`. Both want a sample's value summed over its label sets.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

RUNNING_REQS = "sglang:num_running_reqs"


def sample_sums(text: str) -> dict[str, float]:
    """Sample name -> value summed over label sets; ValueError for text that is not Prometheus format."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def running_requests(text: str) -> float:
    return sample_sums(text).get(RUNNING_REQS, 0.0)
