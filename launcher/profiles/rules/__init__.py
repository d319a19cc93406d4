"""Validation rules: each a small named function returning findings with a fix in the message.

Levels: error (refuse), warning (run, but say so), ineligible (cannot run on this host),
requires (depends on host facts that were not given; shown under the plan's `requires`).

The rules live in topic modules (`nccl_env`, `parent_env`, `allreduce`, `expert_parallel`,
`parser`, `speculation`, `host`, `metrics`, `env_file`, `request_cap`); `RULES` below is the one registry. Its order is the order
findings come out in, which plans, warnings and the golden files show, so a new rule is
appended rather than slotted in by topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from launcher.profiles.rules.allreduce import (
    FUSION_PATCH,
    expandable_segments_with_pcie_ipc,
    fusion_disabled_by_enforce,
    fusion_needs_sm120_patch,
    fusion_over_pcie,
    pcie_ipc_adaptive_tiers,
    pcie_ipc_fallback,
    pcie_ipc_prefill_rows,
    symm_mem_eligibility,
)
from launcher.profiles.rules.context import Context, Finding, Level
from launcher.profiles.rules.env_file import env_file_size
from launcher.profiles.rules.expert_parallel import deepep_low_latency_transport, deepep_normal_mode
from launcher.profiles.rules.host import gpu_count, host_requirements
from launcher.profiles.rules.metrics import metrics_needed_by_drain
from launcher.profiles.rules.nccl_env import (
    graph_mixing_off_with_eager_nccl,
    ll128_on_pcie,
    nccl_proto_without_simple,
    p2p_level_across_sockets,
    tree_with_cuda_graphs,
    unknown_nccl_env,
)
from launcher.profiles.rules.parent_env import (
    PARENT_SET_ENV,
    cuda_device_max_connections,
    deterministic_env_conflict,
    parent_set_env_conflict,
)
from launcher.profiles.rules.parser import sglang_flags
from launcher.profiles.rules.request_cap import tiers_above_cap
from launcher.profiles.rules.server_log import startup_lines_need_info_logging
from launcher.profiles.rules.speculation import (
    adaptive_config,
    adaptive_fallback,
    eagle_spec_params,
    speculation_in_profile,
)

Rule = Callable[[Context], Iterator[Finding]]

# (rule, needs SGLang's parser): the parser rule runs only when evaluate is asked for it.
RULES: list[tuple[Rule, bool]] = [
    (tree_with_cuda_graphs, False),
    (ll128_on_pcie, False),
    (cuda_device_max_connections, False),
    (parent_set_env_conflict, False),
    (nccl_proto_without_simple, False),
    (expandable_segments_with_pcie_ipc, False),
    (pcie_ipc_fallback, False),
    (fusion_over_pcie, False),
    (deepep_low_latency_transport, False),
    (sglang_flags, True),
    (deepep_normal_mode, False),
    (symm_mem_eligibility, False),
    (fusion_needs_sm120_patch, False),
    (unknown_nccl_env, False),
    (speculation_in_profile, False),
    (host_requirements, False),
    (fusion_disabled_by_enforce, False),
    (gpu_count, False),
    (pcie_ipc_prefill_rows, False),
    (graph_mixing_off_with_eager_nccl, False),
    (p2p_level_across_sockets, False),
    (eagle_spec_params, False),
    (metrics_needed_by_drain, False),
    (startup_lines_need_info_logging, False),
    (adaptive_fallback, False),
    (adaptive_config, False),
    (deterministic_env_conflict, False),
    (env_file_size, False),
    (tiers_above_cap, False),
    (pcie_ipc_adaptive_tiers, False),
]


def evaluate(ctx: Context, use_parser: bool = False) -> list[Finding]:
    """Every rule's findings, in registry order; the parser rule only with use_parser."""
    out: list[Finding] = []
    for fn, needs_parser in RULES:
        if needs_parser and not use_parser:
            continue
        out.extend(fn(ctx))
    return out


__all__ = ["FUSION_PATCH", "PARENT_SET_ENV", "RULES", "Context", "Finding", "Level", "Rule", "evaluate"]
