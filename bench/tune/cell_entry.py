"""A measured cell as its journal line (bench/tune/journal.py), keyed on what makes it reusable when the tune
resumes: the profile's files (`profile_hash`), the spec overlays in play (`overlay_hash`, part of the settings
digest), the settings digest and the plan digest the server ran."""

from __future__ import annotations

from collections.abc import Sequence

from bench.bundle.schema import Cell
from bench.client.request_record import RequestRecord
from bench.tune import journal, levels
from bench.tune.objective import Objective
from bench.tune.space import Candidate
from launcher.errors import KitError
from launcher.profiles import loader
from launcher.profiles.spec_params import SpecParams

SERVER_ONLY = "server-only"  # the profile hash of a profile this machine has no file of


def profile_hash(name: str) -> str:
    """sha256 of the profile's files (its `extends` chain), or SERVER_ONLY when this machine has none."""
    try:
        return journal.profile_hash(loader.load(name).chain)
    except (KitError, OSError):
        return SERVER_ONLY


def overlay_hash(specs: Sequence[str]) -> str:
    """sha256 of the spec overlays in play: an edited overlay changes every cell under it."""
    paths = [p for p in (loader.find_file(s, loader.SPEC_DIR) for s in specs) if p is not None]
    return journal.profile_hash(paths)


def entry_of(cand: Candidate, record: Cell, rows: Sequence[RequestRecord], detail: journal.Detail, *,
             phase: journal.Phase, rnd: int, spec_params: SpecParams | None, objective: Objective,
             hashes: dict[str, str], settings_digest: str) -> journal.Entry:
    """The journal line of a measured cell: `ok` with its repeats as the objective judges them
    (bench/tune/levels.py), or `failed` with why; `hashes`: profile name -> `profile_hash`."""
    common = dict(label=cand.label, profile=cand.profile, plan_digest=str(record.plan_digest or ""),
                  profile_hash=hashes.get(cand.profile, SERVER_ONLY), settings_digest=settings_digest,
                  phase=phase, round=rnd, spec=cand.spec, spec_params=spec_params, detail=detail)
    if record.valid:
        return journal.Entry(status="ok", repeats=levels.repeats_of(record.per_repeat, rows, objective), **common)
    return journal.Entry(status="failed", reason=str(record.invalid_reason), **common)
