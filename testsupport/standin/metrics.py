"""Prometheus text for /metrics, with SGLang's metric names and labels, marked ``# SIMULATED``.

``sglang:spec_accept_length`` is the lifetime average here (SGLang's gauge holds the last logging
interval's value); request counters grow when a request completes, as in SGLang.
"""

from __future__ import annotations

from collections.abc import Mapping

from testsupport.standin.engine import Engine


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

    gauge("num_running_reqs", "The number of running requests.", stats.running)
    gauge("num_queue_reqs", "The number of requests in the waiting queue.", 0)
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
    counter("num_requests", "Number of requests processed.", base, stats.num_requests_total)
    counter("prompt_tokens", "Number of prefill tokens processed.", base, stats.prompt_tokens_total)
    counter(
        "generation_tokens", "Number of generation tokens processed.", base, stats.generation_tokens_total
    )
    return "\n".join(lines) + "\n"
