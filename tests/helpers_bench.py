"""Shared bench test helpers: request records and synthetic result cells and manifests."""

from __future__ import annotations

from dataclasses import fields

from bench.client.request_record import RequestRecord
from bench.report.load_rows import LoadPoint


def rec(pid: str, ttft: float, e2e: float, tokens: int, verify: int | None, gaps: list[float], ok: bool = True) -> RequestRecord:
    """One measured request with `gaps` raw chunk gaps (two tokens per chunk)."""
    return RequestRecord(
        prompt_id=pid, ok=ok, ttft_s=ttft, e2e_s=e2e, completion_tokens=tokens, spec_verify_ct=verify,
        chunk_gaps_s=gaps, chunk_tokens=[2] * (len(gaps) + 1), text=f"text {pid}",
    )


def cell(profile: str, spec: str, tps: float, sd: float, digest: str = "d1", valid: bool = True, repeats: int = 3) -> dict:
    """A (profile, spec) result file as bench writes it, with one concurrency level."""
    agg = {"output_throughput_mean": tps, "output_throughput_sd": sd, "mean_tpot_ms_mean": 10.0,
           "mean_tpot_ms_sd": 0.1, "mean_ttft_ms_mean": 40.0, "mean_ttft_ms_sd": 1.0, "accept_length_mean": 2.0,
           "accept_length_sd": 0.0, "repeats_valid": repeats}
    return {"profile": profile, "spec": spec, "valid": valid, "plan_digest": digest, "invalid_reason": None if valid else "x",
            "by_concurrency": {"1": agg}, "correctness": {"status": "PASS"}}


def manifest(gpu: str = "RTX PRO 6000", driver: str = "580.1", sglang: str = "0.5.23") -> dict:
    """A complete, real (not simulated) run's manifest on eight GPUs named `gpu`."""
    return {"run_id": "r", "complete": True, "simulated": False, "settings": {"concurrency": [1]},
            "host": {"available": True, "gpus": [{"name": gpu}] * 8, "driver": driver},
            "server": {"sglang_version": sglang}}


def load_point(cell: str, load: str, total: float | None, per_user: float | None, status: str = "OK", **kw) -> LoadPoint:
    """A load-view point with the given fields, every other one None."""
    base = {f.name: None for f in fields(LoadPoint)}
    return LoadPoint(**{**base, "cell": cell, "load": load, "status": status, "total_tps": total,
                        "per_user_tps": per_user, "frontier": False, **kw})
