"""The correctness gate of both bundles side by side, for `bench compare`: each cell's verdict and
log-probability statistics (bench/run/logprob_gate.py) on A and on B, and the gate's settings where the two
bundles were gated differently. Information: a verdict that differs between hosts is reported, never refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.bundle import names as bundle_names
from bench.bundle.schema import Cell, Manifest
from bench.report.deltas import matched

GATE_STATS = ("tokens", "mean_delta", "p99_delta", "max_delta", "max_flip_gap")  # a cell's statistics shown
GATE_SETTINGS = ("null_factor", "mean_delta", "max_delta", "p99_delta", "max_flip_gap", "min_tokens", "top_k",
                 "collapse_ratio", "min_accept", "min_exact_match")


@dataclass(frozen=True)
class GateSide:
    """One bundle's correctness verdict on a cell and its log-probability statistics (GATE_STATS)."""

    status: str | None
    exact_match_rate: float | None
    tokens: int | float | None
    mean_delta: float | None
    p99_delta: float | None
    max_delta: float | None
    max_flip_gap: float | None


@dataclass(frozen=True)
class GateRow:
    """A cell both bundles have: its verdict on A and on B."""

    profile: str
    spec: str
    a: GateSide
    b: GateSide
    same_verdict: bool


def _gate_of(cell: Cell) -> GateSide:
    corr = cell.correctness
    stats = (corr.model_extra or {}).get("logprobs")
    stats = stats if isinstance(stats, dict) else {}
    numbers = {k: stats.get(k) if isinstance(stats.get(k), int | float) else None for k in GATE_STATS}
    return GateSide(status=corr.status, exact_match_rate=corr.exact_match_rate, **numbers)


def gate_rows(cells_a: list[Cell], cells_b: list[Cell]) -> list[GateRow]:
    """Each cell both bundles have: its correctness verdict and statistics on A and on B, and whether the
    verdicts agree. Information: a verdict that differs between hosts is reported, never refused."""
    out = []
    for ca, cb in matched(cells_a, cells_b):
        ga, gb = _gate_of(ca), _gate_of(cb)
        out.append(GateRow(profile=ca.profile, spec=ca.spec + bundle_names.point_text(ca.spec_params),
                           a=ga, b=gb, same_verdict=ga.status == gb.status))
    return out


def gate_setting_differences(ma: Manifest, mb: Manifest) -> list[str]:
    """The gate's settings that differ between the two bundles' manifests (their verdicts then differ in
    meaning too)."""
    a, b = ma.gate, mb.gate
    return [f"gate {k}: A={a.setting(k)} B={b.setting(k)}" for k in GATE_SETTINGS if a.setting(k) != b.setting(k)]
