"""Prometheus text for /metrics, with SGLang's metric names and labels, marked ``# SIMULATED``.

Names, label names and histogram buckets follow SGLang 0.5.23's
``sglang/srt/observability/metrics_collector.py`` (docs/evidence.md#sglang-metrics): the scheduler's
gauges (``SchedulerMetricsCollector``) and the tokenizer's counters and latency histograms
(``TokenizerMetricsCollector``; the request counters and TTFT/TPOT carry ``is_streaming``).
``sglang:spec_accept_length`` is the lifetime average here (SGLang's gauge holds the last logging
interval's value) and ``sglang:gen_throughput`` the generation tokens over the server's lifetime;
request counters grow when a request completes, as in SGLang.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence

from testsupport.standin.engine import Engine

# SGLang 0.5.23's default buckets (TokenizerMetricsCollector.__init__).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
INTER_TOKEN_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
    0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)


def _histogram(name: str, doc: str, labels: Mapping[str, str], buckets: Sequence[float],
               values: Sequence[float]) -> list[tuple[str, Mapping[str, str], float]]:
    ordered = sorted(values)
    samples: list[tuple[str, Mapping[str, str], float]] = [
        (f"{name}_bucket", {**labels, "le": repr(float(b))}, bisect.bisect_right(ordered, b)) for b in buckets
    ]
    samples.append((f"{name}_bucket", {**labels, "le": "+Inf"}, len(ordered)))
    samples.append((f"{name}_sum", labels, sum(ordered)))
    samples.append((f"{name}_count", labels, len(ordered)))
    return samples


def _labels(labels: Mapping[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}"


def _family(name: str, kind: str, doc: str, samples: list[tuple[str, Mapping[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    lines += [f"{sample}{_labels(labels)} {float(value)!r}" for sample, labels, value in samples]
    return lines


def render_metrics(engine: Engine) -> str:
    """The /metrics body for the engine's current state."""
    args, stats = engine.args, engine.stats
    base = {"model_name": args.served_model_name, "engine_type": "unified"}
    sched = {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    lines = ["# SIMULATED: these metrics come from the SGLang stand-in test double, not a real engine."]

    def gauge(name: str, doc: str, value: float) -> None:
        lines.extend(_family(f"sglang:{name}", "gauge", doc, [(f"sglang:{name}", sched, value)]))

    def counter(name: str, doc: str, labels: Mapping[str, str], value: float) -> None:
        lines.extend(_family(f"sglang:{name}", "counter", doc, [(f"sglang:{name}_total", labels, value)]))

    gauge("num_running_reqs", "The number of running requests.", stats.running_gauge)
    gauge("num_queue_reqs", "The number of requests in the waiting queue.", stats.waiting)
    uptime = max(1e-9, time.monotonic() - engine.start_monotonic)
    gauge("gen_throughput", "The generation throughput (token/s).", stats.generation_tokens_total / uptime)
    if args.speculative:
        gauge(
            "spec_accept_length",
            "Mean acceptance length of speculative decoding (lifetime average in the stand-in).",
            stats.avg_spec_accept_length or 0.0,
        )
        if args.speculative_num_steps is not None:
            gauge("spec_num_steps", "Currently active speculative_num_steps.", args.speculative_num_steps)
        if args.speculative_num_draft_tokens is not None:
            gauge(
                "spec_num_draft_tokens",
                "Currently active speculative_num_draft_tokens.",
                args.speculative_num_draft_tokens,
            )
    counter(
        "spec_verify_calls",
        "Number of speculative decoding verification calls.",
        base,
        stats.spec_verify_calls_total,
    )
    streams = sorted(stats.by_stream) or ["false"]

    def per_stream(name: str, doc: str, key: str) -> None:
        samples = [(f"sglang:{name}_total", {**base, "is_streaming": st},
                    stats.by_stream.get(st, {}).get(key, 0)) for st in streams]
        lines.extend(_family(f"sglang:{name}", "counter", doc, samples))

    per_stream("num_requests", "Number of requests processed.", "requests")
    per_stream("prompt_tokens", "Number of prefill tokens processed.", "prompt")
    per_stream("generation_tokens", "Number of generation tokens processed.", "generation")

    def histogram(name: str, doc: str, buckets: Sequence[float], by_stream: Mapping[str, list[float]] | None,
                  values: Sequence[float] = ()) -> None:
        if by_stream is None:
            samples = _histogram(f"sglang:{name}", doc, base, buckets, values)
        else:
            samples = [s for st in streams
                       for s in _histogram(f"sglang:{name}", doc, {**base, "is_streaming": st}, buckets,
                                           by_stream.get(st, []))]
        lines.extend(_family(f"sglang:{name}", "histogram", doc, samples))

    histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS,
              stats.ttft_s)
    histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", INTER_TOKEN_BUCKETS,
              None, stats.inter_token_s)
    histogram("request_time_per_output_token_seconds",
              "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
              INTER_TOKEN_BUCKETS, stats.tpot_s)
    return "\n".join(lines) + "\n"
