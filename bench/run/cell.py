"""One (profile, spec[, EAGLE-3 point]) result of `bench run`: its record, its verdict over repeats, its correctness gate.

A cell is invalid when any of its repeats is, or when fewer ran than asked; its numbers are the
first concurrency level's aggregate, `by_concurrency` holds every level. The gate compares each
cell's outputs with `baseline`'s under the same spec mode, after every cell has run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import bundle
from bench.run import correctness
from bench.run.settings import RunSettings


def new_cell(*, profile: str, spec: str, settings: RunSettings, num_prompts: int,
             spec_params: dict[str, int] | None = None) -> dict[str, Any]:
    """The record of a cell before anything ran: invalid with no reason until it is closed.

    `spec_params`: the EAGLE-3 point the cell was switched to (`bench run --eagle3`), None for the spec
    overlay's own; `plan_spec_params` is the point the running plan reports (/plan), whichever it is."""
    return {
        "profile": profile,
        "spec": spec,
        "spec_params": dict(spec_params) if spec_params else None,
        "plan_spec_params": None,
        "valid": False,
        "invalid_reason": None,
        "simulated": False,
        "plan_digest": None,
        "setup_digest": None,
        "local": None,
        "switch": {"outcome": "skipped (--no-switch)"} if not settings.switching else None,
        "server": None,
        "api": settings.api,
        "workload": settings.workload,
        "num_prompts": num_prompts,
        "max_tokens": settings.max_tokens,
        "repeats": settings.repeats,
        "concurrency_levels": list(settings.concurrency),
        "warmup": settings.warmup,
        "per_repeat": [],
        "requests_file": f"{bundle.cell_name(profile, spec, spec_params)}{bundle.REQUESTS_SUFFIX}",
    }


def record_plan(cell: dict[str, Any], plan: dict[str, Any] | None) -> None:
    """Which plan the cell ran: its digest (what the server got), its setup digest and this host's values.

    `setup_digest` leaves out what is local to a host (model paths, host, port), so `bench compare`
    can match the same setup measured on another host; `local` keeps those values to show."""
    plan = plan or {}
    cell["plan_digest"] = plan.get("digest")
    cell["setup_digest"] = plan.get("setup_digest")
    cell["local"] = plan.get("local")
    cell["plan_spec_params"] = plan.get("spec_params")


def close_cell(cell: dict[str, Any], *, concurrency: list[int], repeats: int) -> None:
    """Verdict over the repeats, and the aggregate numbers per concurrency level."""
    reps = cell["per_repeat"]
    expected = len(concurrency) * repeats
    if cell["invalid_reason"] is None:
        bad = [x for x in reps if not x["valid"]]
        if bad:
            cell["invalid_reason"] = f"{len(bad)} of {len(reps)} repeats invalid: {bad[0]['invalid_reason']}"
        elif len(reps) < expected:
            cell["invalid_reason"] = f"only {len(reps)} of {expected} repeats ran"
    cell["valid"] = cell["invalid_reason"] is None
    by_c: dict[str, Any] = {}
    for c in concurrency:
        mine = [x for x in reps if x["concurrency"] == c]
        by_c[str(c)] = {"concurrency": c, **bundle.aggregate(mine, cell["valid"])}
    for k, v in by_c[str(concurrency[0])].items():
        cell[k] = v
    cell["by_concurrency"] = by_c
    cell.setdefault("correctness", {"status": "pending"})


def apply_gate(*, run_dir: Path, cells: dict[str, dict[str, Any]], min_exact_match: float) -> None:
    """Every cell's correctness against baseline's outputs under the same spec mode (at the same EAGLE-3
    point when baseline ran it, else at the overlay's)."""
    settings = correctness.GateSettings(min_exact_match=min_exact_match)
    outputs = {
        key: correctness.reference_outputs(bundle.read_requests(run_dir, c["profile"], c["spec"], c.get("spec_params")))
        for key, c in cells.items()
    }
    for key, cell in cells.items():
        base_key = bundle.cell_name(correctness.BASELINE, cell["spec"], cell.get("spec_params"))
        if base_key not in cells:
            base_key = bundle.cell_name(correctness.BASELINE, cell["spec"])
        base = cells.get(base_key)
        cell["correctness"] = correctness.gate(
            cell["spec"],
            outputs[key],
            cell.get("accept_length"),
            outputs.get(base_key) if base is not None else None,
            base.get("accept_length") if base is not None else None,
            settings,
        )
        if not cell.get("valid") and cell["correctness"]["status"] == "PASS":
            cell["correctness"]["status"] = "n/a (invalid run)"  # partial outputs cannot vouch for a profile
