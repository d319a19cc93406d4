"""One (profile, spec[, EAGLE-3 point]) result of `bench run`: the cell while it is measured, its record, its gate.

`CellDraft` is what measuring a cell learns (bench/run/measure.py fills it: the switch, the plan, the
backends, the server, the repeats, or why it stopped). `close_cell` builds the cell's record
(`bundle_schema.Cell`) from it, once: a cell is invalid when any of its repeats is, or when fewer
ran than asked; its numbers are each concurrency level's aggregate, and, where the valid repeats carried
correct-drafts histograms, its acceptance by draft position (bench/bundle/acceptance.py). The gate compares each cell's
outputs with `baseline`'s under the same spec mode, after every cell has run, and gives each record
its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench import JsonObject
from bench.bundle import acceptance as bundle_acceptance
from bench.bundle import aggregate as bundle_aggregate
from bench.bundle import names as bundle_names
from bench.bundle import store as bundle
from bench.bundle.cell_numbers import RepeatSummary
from bench.bundle.schema import Cell, Correctness
from bench.client.arrivals import rate_text
from bench.run import correctness, passes
from bench.run.logprob_gate import Thresholds
from bench.run.settings import RunSettings
from launcher.errors import RuntimeFailure
from launcher.profiles.spec_params import SpecParams, coerce

PENDING = Correctness(status="pending")  # a record's verdict until the gate has judged it
# what an earlier measurement of the same cell tells a draft (`adopt`): bench tune joins its journal's cells
ADOPTED = ("plan_digest", "setup_digest", "local", "plan_spec_params", "server", "backends", "switch", "simulated",
           "max_running_requests")


@dataclass
class CellDraft(bundle_names.CellNames):
    """A cell while it is measured; `close_cell` turns it into its record.

    `spec_params`: the EAGLE-3 point the cell is switched to (`bench run --eagle3`), None for the spec
    overlay's own; `plan_spec_params` is the point the running plan reports (/plan), whichever it is.
    `adaptive_tiers`: the tuned adaptive config ({"B": [steps]}) it is switched to under eagle3-adaptive
    (`bench tune --adaptive`), None for the spec overlay's own."""

    profile: str
    spec: str
    settings: RunSettings
    num_prompts: int
    spec_params: SpecParams | None = None
    plan_spec_params: SpecParams | None = None
    plan_digest: str | None = None
    setup_digest: str | None = None
    local: dict[str, str] | None = None
    switch: JsonObject | None = None
    server: JsonObject | None = None
    backends: list[Any] | None = None
    simulated: bool = False
    invalid_reason: str | None = None  # why the cell stopped before its repeats were done
    per_repeat: list[RepeatSummary] = field(default_factory=list)  # bench/run/repeat.py's summaries
    adaptive_tiers: dict[str, list[int]] | None = None
    # the most requests the server ran at once, from its /server_info (bench/client/server_answers.py running_cap);
    # None when it did not say. No level above it is measured (bench/run/measure.py over_cap)
    max_running_requests: int | None = None

    def adopt(self, earlier: Cell) -> None:
        """What an earlier measurement of this cell (its record) says of its switch, plan and server."""
        for name in ADOPTED:
            if getattr(earlier, name) is not None:
                setattr(self, name, getattr(earlier, name))


def new_cell(*, profile: str, spec: str, settings: RunSettings, num_prompts: int,
             spec_params: SpecParams | None = None,
             adaptive_tiers: dict[str, list[int]] | None = None) -> CellDraft:
    """A cell before anything ran (its switch skipped with --no-switch)."""
    return CellDraft(profile=profile, spec=spec, settings=settings, num_prompts=num_prompts,
                     spec_params=spec_params, adaptive_tiers=adaptive_tiers,
                     switch=None if settings.switching else {"outcome": "skipped (--no-switch)"})


def record_plan(cell: CellDraft, plan: JsonObject | None) -> None:
    """Which plan the cell ran: its digest (what the server got), its setup digest and this host's values.

    `setup_digest` leaves out what is local to a host (model paths, host, port), so `bench compare`
    can match the same setup measured on another host; `local` keeps those values to show."""
    plan = plan or {}
    cell.plan_digest = plan.get("digest")
    cell.setup_digest = plan.get("setup_digest")
    cell.local = plan.get("local")
    point = plan.get("spec_params")
    cell.plan_spec_params = coerce(point) if point else None


def verdict(reps: list[RepeatSummary], stopped: str | None, expected: int) -> str | None:
    """Why the cell is invalid (its own reason, an invalid repeat, repeats missing), None when it is valid."""
    if stopped is not None:
        return stopped
    bad = [x for x in reps if not x.valid]
    if bad:
        return f"{len(bad)} of {len(reps)} repeats invalid: {bad[0].invalid_reason}"
    if len(reps) < expected:
        return f"only {len(reps)} of {expected} repeats ran"
    return None


def close_cell(cell: CellDraft, *, concurrency: list[int], repeats: int, rates: Sequence[float] = ()) -> Cell:
    """The cell's record: its verdict over the repeats and the aggregate numbers per concurrency level and per
    open-loop rate.

    RuntimeFailure naming the field when what the servers reported cannot be recorded."""
    reps = cell.per_repeat
    reason = verdict(reps, cell.invalid_reason, (len(concurrency) + len(rates)) * repeats)
    valid = reason is None
    by_c = {str(c): bundle_aggregate.aggregate([x for x in reps if x.concurrency == c], valid, concurrency=c)
            for c in concurrency}
    by_rate = {rate_text(r): bundle_aggregate.aggregate([x for x in reps if x.request_rate == r], valid,
                                                        request_rate=r) for r in rates}
    accepted = {str(c): bundle_acceptance.of_repeats(x for x in reps if x.concurrency == c) for c in concurrency}
    accepted_rates = {rate_text(r): bundle_acceptance.of_repeats(x for x in reps if x.request_rate == r) for r in rates}
    s = cell.settings
    try:
        return Cell(
            profile=cell.profile, spec=cell.spec, spec_params=cell.spec_params,
            plan_spec_params=cell.plan_spec_params, valid=valid, invalid_reason=reason, simulated=cell.simulated,
            plan_digest=cell.plan_digest, setup_digest=cell.setup_digest, local=cell.local, switch=cell.switch,
            server=cell.server, backends=cell.backends, api=s.api, workload=s.workload,
            num_prompts=cell.num_prompts, max_tokens=s.max_tokens, repeats=s.repeats,
            concurrency_levels=list(s.concurrency), warmup=s.warmup, per_repeat=list(reps),
            max_running_requests=cell.max_running_requests,
            requests_file=bundle_names.requests_file(cell.profile, cell.spec, cell.spec_params),
            by_concurrency=by_c, rate_levels=list(rates), by_rate=by_rate, correctness=PENDING,
            acceptance={c: a for c, a in accepted.items() if a is not None and valid},
            acceptance_by_rate={k: a for k, a in accepted_rates.items() if a is not None and valid},
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise RuntimeFailure(f"{cell.label}: cannot record {where} = {str(err.get('input'))[:80]!r} "
                             f"({err['msg']}); check what the server and its control API report") from None


def point_of(cell: Cell) -> SpecParams | None:
    """The EAGLE-3 point a cell ran: the one it was switched to, else the one its running plan reported."""
    return cell.spec_params or cell.plan_spec_params


def gate_side(run_dir: Path, cell: Cell) -> correctness.Side:
    """What the gate compares of one cell: its correctness pass (texts and log-probabilities), or, for a cell
    without one (an older bundle), its measured texts and no pass."""
    passed = bundle.read_logprobs(run_dir, cell.profile, cell.spec, cell.spec_params, api=cell.api)
    texts = (passes.texts(passed) if passed is not None else
             correctness.reference_outputs(bundle.read_requests(run_dir, cell.profile, cell.spec, cell.spec_params)))
    return correctness.Side(cell.label, texts, passed, cell.first_level().value("accept_length"), point_of(cell))


def reference_key(cells: Mapping[str, Cell], cell: Cell) -> str:
    """The reference cell of a cell: baseline under the same spec mode at the same EAGLE-3 point when baseline
    ran it, else at the overlay's own (the accept-length rule then compares only where the points agree)."""
    key = bundle_names.cell_name(correctness.BASELINE, cell.spec, cell.spec_params)
    return key if key in cells else bundle_names.cell_name(correctness.BASELINE, cell.spec)


def apply_gate(*, run_dir: Path, cells: Mapping[str, Cell], thresholds: Thresholds) -> dict[str, Cell]:
    """Every record with its correctness against its reference cell."""
    sides = {key: gate_side(run_dir, c) for key, c in cells.items()}
    judged = {}
    for key, cell in cells.items():
        ref = sides.get(reference_key(cells, cell))
        result = correctness.gate(cell.spec, sides[key], ref, thresholds=thresholds)
        if not cell.valid and result.status == "PASS":
            result = result.model_copy(update={"status": "n/a (invalid run)"})  # partial outputs cannot vouch for it
        judged[key] = cell.with_correctness(result)
    return judged
