"""Which profiler annotations mark a step, and of what kind (the step-marker tiers in analyse.py's docstring)."""

from __future__ import annotations

import re

from bench.trace.classify import HOST_ALLREDUCE_ANNOTATIONS

_STEP_MODE = re.compile(r"^step\[(?P<mode>[A-Za-z_0-9]+)")
_MODE_KIND = {
    "VERIFY": "verify",
    "TARGET_VERIFY": "verify",
    "DECODE": "decode",
    "DRAFT": "draft",
    "DRAFT_EXTEND": "draft",
    "DRAFT_EXTEND_V2": "draft",
    "EXTEND": "prefill",
    "MIXED": "prefill",
    "SPLIT_PREFILL": "prefill",
    "PREBUILT": "prefill",
    "DLLM_EXTEND": "prefill",
    "IDLE": "",
}
_STAGE_KIND = {"verify": "verify", "draft": "draft", "draft_extend": "draft"}
_GENERIC = (
    ("verify", "verify"),
    ("draft", "draft"),
    ("decode", "decode"),
    ("prefill", "prefill"),
    ("extend", "prefill"),
    ("forward", "forward"),
    ("profilerstep", "forward"),
)
KIND_PREFERENCE = ("verify", "decode", "forward", "draft", "prefill")


def step_kind(name: str) -> tuple[int, str] | None:
    """(tier, kind) for a step marker name, or None if the name is not a step marker."""
    m = _STEP_MODE.match(name)
    if m:
        mode = m.group("mode").upper()
        return 0, _MODE_KIND.get(mode, mode.lower())
    if name in _STAGE_KIND:
        return 1, _STAGE_KIND[name]
    low = name.lower()
    if HOST_ALLREDUCE_ANNOTATIONS.match(name):
        return None
    for key, kind in _GENERIC:
        if key in low:
            return 2, kind
    return None
