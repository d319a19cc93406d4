"""The "Validation rules" table (docs/profiles.md, moved there from the README) against the registered rules: every rule has a row, and each
row names exactly the levels its rules can return (read from the rules' own source), so the table
cannot call an error a warning again."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from launcher.profiles.rules import RULES

PROFILES_DOC = Path(__file__).resolve().parents[4] / "docs" / "profiles.md"
LEVELS = ("error", "warning", "ineligible", "requires")

# A phrase unique to each row's first cell -> the rules that row describes.
ROWS = {
    "`NCCL_ALGO` allows Tree": ["tree_with_cuda_graphs"],
    "allows LL128 on a PCIe host": ["ll128_on_pcie"],
    "`CUDA_DEVICE_MAX_CONNECTIONS`": ["cuda_device_max_connections"],
    "`NCCL_CUMEM_ENABLE=0`": ["parent_set_env_conflict"],
    "`enable-deterministic-inference` (or": ["deterministic_env_conflict"],
    "`NCCL_PROTO` without Simple": ["nccl_proto_without_simple"],
    "`expandable_segments:True`": ["expandable_segments_with_pcie_ipc"],
    "PCIe-IPC at a TP size": ["pcie_ipc_fallback"],
    "trtllm fusion over PCIe": ["fusion_over_pcie"],
    "DeepEP low-latency": ["deepep_low_latency_transport"],
    "unknown, abbreviated, aliased": ["sglang_flags"],
    "DeepEP normal mode": ["deepep_normal_mode"],
    "torch symm-mem": ["symm_mem_eligibility"],
    "FlashInfer fusion on SM120": ["fusion_needs_sm120_patch"],
    "misspelt `NCCL_*` name": ["unknown_nccl_env"],
    "fusion backend while": ["fusion_disabled_by_enforce"],
    "a profile's `[requires]`": ["host_requirements", "gpu_count"],
    "`speculative-*` keys": ["speculation_in_profile"],
    "PCIe-IPC workspace above": ["pcie_ipc_prefill_rows"],
    "an adaptive tier whose widest verify": ["pcie_ipc_adaptive_tiers"],
    "`NCCL_GRAPH_MIXING_SUPPORT=0`": ["graph_mixing_off_with_eager_nccl"],
    "`NCCL_P2P_LEVEL=SYS`": ["p2p_level_across_sockets"],
    "EAGLE (steps, top-k, draft tokens)": ["eagle_spec_params"],
    "`enable-metrics` turned off": ["metrics_needed_by_drain"],
    "`log-level` above info": ["startup_lines_need_info_logging"],
    "would fall back to static speculation": ["adaptive_fallback"],
    "`speculative-adaptive` config SGLang cannot load": ["adaptive_config"],
    "An `[env]` too large for the server": ["env_file_size"],
    "keyed above the running cap": ["tiers_above_cap"],
}


def _table() -> list[tuple[str, str]]:
    text = PROFILES_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Validation rules\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Rule")]
    out = []
    for line in rows:
        if set(line) <= set("|- "):
            continue
        # the first cell may hold `|` inside backticks only if escaped; split on the last " | "
        cells = line.strip().strip("|").rsplit(" | ", 1)
        out.append((cells[0].strip(), cells[1].strip()))
    return out


def _levels_in_source(fn) -> set[str]:
    src = inspect.getsource(fn)
    return set(re.findall(r'finding\(\s*"(error|warning|ineligible|requires)"', src))


def _levels_in_text(outcome: str) -> set[str]:
    return {lv for lv in LEVELS if re.search(rf"\b{lv}\b", outcome)}


def test_every_row_is_mapped_once_and_every_rule_has_a_row():
    table = _table()
    assert len(table) == len(ROWS)
    for cell, _ in table:
        assert sum(phrase in cell for phrase in ROWS) == 1, f"docs/profiles.md rules row matches no or several entries: {cell}"
    registered = {fn.__name__ for fn, _ in RULES}
    described = {name for names in ROWS.values() for name in names}
    assert registered == described, f"rules without a row in docs/profiles.md: {registered - described}; rows for no rule: {described - registered}"


def test_each_rows_levels_are_the_levels_its_rules_return():
    by_name = {fn.__name__: fn for fn, _ in RULES}
    for cell, outcome in _table():
        [names] = [names for phrase, names in ROWS.items() if phrase in cell]
        in_source = set().union(*(_levels_in_source(by_name[n]) for n in names))
        assert in_source, f"no literal level found in {names}"
        assert _levels_in_text(outcome) == in_source, (cell, outcome, sorted(in_source))


def test_the_unknown_nccl_name_row_says_error():
    """The row once said "warning" while a misspelt NCCL_* name is refused (exit 2); it says what the rule does:
    an error within TYPO_DISTANCE edits of a known name, a warning otherwise."""
    from launcher.profiles.rules.nccl_env import TYPO_DISTANCE

    [(cell, outcome)] = [(c, o) for c, o in _table() if "`NCCL_*`" in c]
    assert outcome.startswith("error")
    assert {1: "one", 2: "two", 3: "three"}[TYPO_DISTANCE] + " edits" in cell
    assert "exits 2" in outcome and "more than two edits" in outcome and "warning" in outcome
