"""What every rule reads (the resolved profile, env, server flags, host facts) and what it returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from launcher.profiles import running_requests
from launcher.profiles.hostfacts import HostFacts
from launcher.profiles.loader import Resolved

Level = Literal["error", "warning", "ineligible", "requires"]


@dataclass
class Finding:
    level: Level
    rule: str
    key: str
    message: str
    file: Path | None = None
    option: str | None = None  # the command-line option that set the key (e.g. --spec-params), when no file did

    def render(self) -> str:
        if self.option:
            return f"{self.option}: {self.message}"
        where = f"{self.file}: key '{self.key}': " if self.file else (f"key '{self.key}': " if self.key else "")
        return f"{where}{self.message}"


@dataclass
class Context:
    resolved: Resolved
    spec: str
    env: dict[str, str]
    server: dict[str, object]
    facts: HostFacts | None
    flags: list[str] = field(default_factory=list)
    # {batch size: candidate steps} of a tuned adaptive config the plan carries (launcher/profiles/adaptive_tiers.py):
    # its file is written into the state dir only when the plan is rendered, so the rules read the record
    adaptive_tiers: dict[int, list[int]] | None = None

    def origin(self, key: str) -> Path | None:
        return self.resolved.origin.get(key)

    def finding(self, level: Level, rule: str, key: str, message: str) -> Finding:
        return Finding(level, rule, key, message, self.origin(key))

    def is_pcie(self) -> bool | None:
        """From host facts when given, else from what the profile says it requires."""
        if self.facts is not None and self.facts.is_pcie is not None:
            return self.facts.is_pcie
        wanted = self.resolved.requires.interconnect
        return {"pcie": True, "nvlink": False}.get(wanted or "any")

    def sm_versions(self) -> set[str] | None:
        if self.facts is not None and self.facts.sm_versions:
            return self.facts.sm_versions
        return set(self.resolved.requires.sm) if self.resolved.requires.sm else None

    def cuda_graphs_on(self) -> bool:
        """Decode/verify CUDA graphs, from every flag that can turn them off (cuda_graph_config.py)."""
        return not (
            self.server.get("disable-cuda-graph") is True
            or self.server.get("disable-decode-cuda-graph") is True
            or self.server.get("cuda-graph-backend-decode") == "disabled"
            or _graph_config_backend(self.server.get("cuda-graph-config"), "decode") == "disabled"
        )

    def tp_size(self) -> int | None:
        return _as_int(self.server.get("tp-size"))


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def graph_config(raw: object, phase: str) -> dict:
    """One phase's table (`decode`, `prefill`) of --cuda-graph-config's JSON; {} when absent or not parseable
    (the parser rule reports a malformed value)."""
    if not isinstance(raw, str):
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    settings = parsed.get(phase) if isinstance(parsed, dict) else None
    return settings if isinstance(settings, dict) else {}


def _graph_config_backend(raw: object, phase: str) -> str | None:
    """`backend` of one phase in --cuda-graph-config's JSON; None when absent or not parseable."""
    backend = graph_config(raw, phase).get("backend")
    return backend if isinstance(backend, str) else None


# Default decode CUDA-graph max batch at TP >= 4 on GPUs of 60 GB and more (memory_hook.py:132-170):
# 512 (H100/A100 class, H200/RTX PRO 6000 96 GB class, B200). TP < 4 gets 256 below 160 GB.
_DEFAULT_MAX_BS = {True: 512, False: 256}


def _graph_max_bs(ctx: Context) -> tuple[int, str]:
    """The decode CUDA-graph max batch the flags set, or SGLang's default for a large GPU, and where from."""
    explicit = _as_int(ctx.server.get("cuda-graph-max-bs-decode"))
    if explicit is not None:
        return explicit, "--cuda-graph-max-bs-decode"
    bs = ctx.server.get("cuda-graph-bs-decode")
    sizes = [_as_int(b) for b in (bs if isinstance(bs, list) else str(bs).split())] if bs else []
    if sizes and all(s is not None for s in sizes):
        return max(s for s in sizes if s is not None), "--cuda-graph-bs-decode"
    decode = graph_config(ctx.server.get("cuda-graph-config"), "decode")
    if isinstance(decode.get("max_bs"), int):
        return decode["max_bs"], "--cuda-graph-config decode.max_bs"
    sizes = decode.get("bs")
    if isinstance(sizes, list) and sizes and all(isinstance(b, int) and not isinstance(b, bool) for b in sizes):
        return max(sizes), "--cuda-graph-config decode.bs"
    tp = ctx.tp_size()
    default = _DEFAULT_MAX_BS[tp is None or tp >= 4]
    return default, f"SGLang's default for GPUs of 60 GB or more at TP {tp if tp is not None else '?'} (memory_hook.py:132-170)"


def _decode_max_bs(ctx: Context) -> tuple[int, str]:
    """The widest captured decode batch in requests: the graph's max batch clamped to the request pool,
    which is --max-running-requests (base_cuda_graph_runner.py:77-101 via base_runner.py:367-390)."""
    max_bs, source = _graph_max_bs(ctx)
    running, why = running_requests.resolve(ctx.server)
    if running is not None and running < max_bs:
        return running, f"the request pool of {why}, which clamps the captured batches (base_cuda_graph_runner.py:92-101)"
    return max_bs, source
