"""The server's /metrics is what a production switch drains on."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding

DRAIN_METRIC = "sglang:num_running_reqs"


def metrics_needed_by_drain(ctx: Context) -> Iterator[Finding]:
    """A switch waits until /metrics reports no running request before it stops the server; without
    --enable-metrics SGLang serves no /metrics, so no switch away from this profile could tell whether
    requests are still running (base.toml turns it on for every profile)."""
    if ctx.server.get("enable-metrics") is not True:
        yield ctx.finding(
            "error", "metrics_needed_by_drain", "server.enable-metrics",
            f"enable-metrics must stay true: a switch drains by counting running requests from /metrics "
            f"({DRAIN_METRIC}), and without it a switch away from this profile would stop requests in "
            "flight; remove this key from the profile (base.toml sets it)")
