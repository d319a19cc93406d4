"""OUT/tune-state.json: what a tune must remember across a kill — the plan it started from (production goes
back to it at the end of any run, resumed or not, unless --apply) and whether it finished (a finished tune is
no resumable one: a later run into the same OUT/ needs --fresh). Written atomically, read defensively."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench import JsonObject
from bench.control.production import PlanRef
from bench.tune import journal
from launcher import atomic

STATE = "tune-state.json"
KEPT = ("name", "spec", "spec_params", "digest")  # what the state keeps of the start plan, in this order


def read(out: Path, settings_digest: str) -> JsonObject | None:
    """The state when it is this tune's (same measuring settings, a named start plan), else None (absent,
    damaged, or another tune's)."""
    try:
        data = json.loads((out / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (isinstance(data, dict) and data.get("settings_digest") == settings_digest
            and isinstance(data.get("start_plan"), dict) and data["start_plan"].get("name")):
        return data
    return None


def record(out: Path, settings_digest: str, plan: PlanRef) -> PlanRef:
    """A new tune's start plan (its name, spec, point and digest), written before anything is switched; what a
    resumed tune reads back (its adaptive tiers are not kept)."""
    keep = {k: v for k, v in plan.to_json().items() if k in KEPT}
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / STATE, json.dumps({"settings_digest": settings_digest, "start_plan": keep}, indent=2))
    return PlanRef.from_json(keep)


def mark_finished(out: Path, settings_digest: str, written: Path) -> None:
    """The tune ended with production as promised: OUT/ holds a finished tune and its results' folder."""
    data = read(out, settings_digest)
    if data is not None:
        atomic.write_text(out / STATE, json.dumps({**data, "finished": True, "result": str(written)}, indent=2))


def set_aside(out: Path) -> list[tuple[Path, Path]]:
    """--fresh: the journal and state of an earlier tune renamed with a time stamp (kept, not resumed)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for name in (journal.JOURNAL, STATE):
        src = out / name
        if src.exists():
            dst = src.with_name(f"{src.stem}.{stamp}{src.suffix}")
            src.rename(dst)
            moved.append((src, dst))
    return moved
