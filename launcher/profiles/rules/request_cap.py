"""Adaptive tiers keyed above the most requests the server runs at once are never used.

SGLang 0.5.23 routes a running batch to the largest adaptive tier at or below its size, after padding it to the
next size of an explicit --cuda-graph-bs-decode list (srt/speculative/adaptive_spec_params.py:342-358;
eagle_worker_v2.py:1408-1414 hands the router that raw flag, None by default). The batch never holds
more than the scheduler's max_running_requests: `--max-running-requests` when the plan gives it, else 48 under
EAGLE/EAGLE3 (srt/arg_groups/speculative_hook.py:1086-1093: only when the flag is absent), both capped lower by
the KV cache's token capacity (srt/mem_cache/kv_cache_configurator.py:3119-3132). The decode CUDA-graph batch
sizes stop at that limit (srt/model_executor/runner/base_cuda_graph_runner.py:91-101), and a batch padded past it
by an explicit list is routed the same as the list's last size at or below the cap (tier_routing.Routing). A tuned tier keyed above the limit was chosen from a level the server never runs.
"""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles import running_requests
from launcher.profiles.rules.context import Context, Finding
from launcher.profiles.tier_routing import read_config


def tiers_above_cap(ctx: Context) -> Iterator[Finding]:
    """An adaptive tier keyed above the running cap: refused, since that tier is never used. The tiers are a
    tuned record's (`--adaptive-tiers`, the control API's `adaptive_tiers`, a profile's `[adaptive_tiers]`)
    or the config file the plan names (SGLang's own default config keeps a tier 64 that its cap of 48 never
    reaches: the kit's eagle3-adaptive.json leaves it out)."""
    server = ctx.server
    if server.get("speculative-adaptive") is not True:
        return
    tiers = ctx.adaptive_tiers
    path = server.get("speculative-adaptive-config")
    if tiers is None and isinstance(path, str) and path and not (path.startswith("<") and path.endswith(">")):
        tiers, _ = read_config(path)  # unreadable: rule adaptive_config says why
    if not tiers:
        return
    cap, why = running_requests.resolve(server)
    if cap is None:
        return
    above = sorted(b for b in tiers if b > cap)
    if not above:
        return
    keys = ",".join(str(b) for b in above)
    yield ctx.finding(
        "error", "tiers_above_cap", "server.max-running-requests",
        f"adaptive tier{'s' if len(above) > 1 else ''} {keys} above the server's running cap {cap} ({why}): "
        f"SGLang never runs a batch larger than {cap} (the KV cache may hold it lower still), so "
        f"{'those tiers are' if len(above) > 1 else 'that tier is'} never used "
        f"(srt/speculative/adaptive_spec_params.py:342-358). Drop {'them' if len(above) > 1 else 'it'} (tune at "
        f"concurrency levels up to {cap}), or give the plan --max-running-requests {max(above)} or more")
