"""The most requests an SGLang 0.5.23 server runs at once, as far as a plan's flags tell it.

`--max-running-requests` when the plan gives it; else 48 under the speculative algorithms that set it when
the flag is absent (srt/arg_groups/speculative_hook.py:1086-1093 for EAGLE/EAGLE3, which also covers NEXTN and
STANDALONE, spec_info.py:255-266; NGRAM :1294-1298, DFLASH :438-442, DSPARK :852-856, FROZEN_KV_MTP :992-996);
else unknown from the flags (SGLang sizes it from memory). The scheduler may still cap it lower at half the
KV cache's token capacity (srt/mem_cache/kv_cache_configurator.py:3119-3132): the running server's own figure
is its /server_info (bench/client/server_answers.py `running_cap`).
"""

from __future__ import annotations

from collections.abc import Mapping

SPEC_RUNNING_REQUESTS = 48
SETS_RUNNING_REQUESTS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP"})
HOOK_SRC = "speculative_hook.py:1086-1093"


def resolve(server: Mapping[str, object]) -> tuple[int | None, str]:
    """(requests at once, where that comes from) from a plan's flags keyed without `--` (the rules' `ctx.server`,
    activation.flag_map); (None, "") when the flags do not fix it or give a malformed value (the parser rule
    reports that)."""
    raw = server.get("max-running-requests")
    if raw is not None and raw is not True:
        text = str(raw).strip()
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            return None, ""
        return int(text), "--max-running-requests, which SGLang keeps under speculation (" + HOOK_SRC + " sets 48 only when it is absent)"
    algo = str(server.get("speculative-algorithm") or "").upper()
    if algo in SETS_RUNNING_REQUESTS:
        return SPEC_RUNNING_REQUESTS, f"SGLang 0.5.23's {SPEC_RUNNING_REQUESTS} under {algo} without --max-running-requests ({HOOK_SRC})"
    return None, ""
