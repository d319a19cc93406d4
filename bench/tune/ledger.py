"""What a tune's journal says of each cell (`Ledger`): its finished entries, its outputs and its correctness
verdict against `baseline+<spec>`, the reference cell of its spec mode. bench/tune/runner.py appends to it as
cells finish; bench/tune/result.py reads it for the bundle and tune.json."""

from __future__ import annotations

from collections.abc import Sequence

from bench.bundle.schema import Correctness
from bench.client.request_record import RequestRecord
from bench.run import correctness, passes
from bench.run.logprob_gate import Thresholds
from bench.run.passes import Reply
from bench.tune import journal
from bench.tune.planning import REFERENCE_PROFILE
from bench.tune.space import Candidate
from launcher.profiles.spec_params import SpecParams

LOGPROBS = "logprobs"  # a journal entry's detail key of the cell's correctness pass


def reference_label(spec: str) -> str:
    """The reference cell of a spec mode: baseline's outputs under it."""
    return f"{REFERENCE_PROFILE}+{spec}"


class Ledger:
    """The journal entries of one tune, reused and new, in order, and what they say of each label."""

    def __init__(self, thresholds: Thresholds, api: str = "generate"):
        self.thresholds = thresholds
        self.api = api  # the API the correctness passes' raw replies came from
        self.entries: list[journal.Entry] = []

    def entries_of(self, label: str, phases: Sequence[str] = journal.PHASES) -> list[journal.Entry]:
        return [e for e in self.entries if e.label == label and e.phase in phases]

    def failure(self, label: str) -> str | None:
        """Why a cell cannot be chosen: its server failed, or its output is wrong against the reference."""
        for e in self.entries_of(label):
            if e.status == "failed":
                return e.reason or "failed"
        verdict = self.gate(label)
        if verdict is not None and verdict.status != "PASS":
            why = "; ".join(verdict.reasons) or verdict.status
            return f"wrong output: {why}" if verdict.status == "FAIL" else f"not verified: {why}"
        return None

    def wrong(self, label: str) -> bool:
        verdict = self.gate(label)
        return verdict is not None and verdict.status == "FAIL"

    def rows_of(self, label: str, phases: Sequence[str] = journal.PHASES) -> list[RequestRecord]:
        return [r for e in self.entries_of(label, phases) if e.status == "ok" for r in e.detail.rows]

    def correctness_pass(self, label: str, phases: Sequence[str] = journal.PHASES) -> list[Reply] | None:
        """The cell's correctness pass (bench/run/passes.py: one reply per prompt and level) from the first finished
        measurement that ran one; None before any did."""
        for e in self.entries_of(label, phases):
            passed = e.detail.logprobs if e.status == "ok" else None
            if passed is not None:
                replies = [Reply.from_json(r, self.api) for r in passed]
                return [r for r in replies if r is not None]
        return None

    def point_of(self, label: str, phases: Sequence[str] = journal.PHASES) -> SpecParams | None:
        """The EAGLE-3 point a cell ran: the one it was switched to, else the one its running plan reported."""
        for e in self.entries_of(label, phases):
            if e.status != "ok":
                continue
            point = e.spec_params or (e.detail.cell.plan_spec_params if e.detail.cell is not None else None)
            if point is not None:
                return point
        return None

    def side(self, label: str, phases: Sequence[str] = journal.PHASES) -> correctness.Side | None:
        """What the gate knows of a cell (its texts, correctness pass, accept length and point); None before it
        has outputs. The pass is the label's, whichever phase ran it (the running plan's runs where it is measured
        in place, before its reference cell); for a cell without one, its measured texts (in `phases`)."""
        passed = self.correctness_pass(label)
        if passed is not None:
            texts = passes.texts(passed)
        else:
            rows = self.rows_of(label, phases)
            if not rows:
                return None
            texts = correctness.reference_outputs(rows)
        accepts = self.accept_lengths(label, phases)
        return correctness.Side(label, texts, passed, sum(accepts) / len(accepts) if accepts else None,
                                self.point_of(label, phases))

    def gate(self, label: str) -> Correctness | None:
        """The correctness verdict of a cell's correctness pass against baseline's under its spec mode (the
        measured texts, and no log-probabilities, when it has none); None before the cell has outputs."""
        if not self.rows_of(label):
            return None
        spec = self.spec_of(label)
        ref_label = reference_label(spec)
        cell = self.side(label)
        assert cell is not None
        verdict = correctness.gate(spec, cell, self.side(ref_label, ("reference",)), thresholds=self.thresholds)
        if verdict.status == "n/a (no baseline)":
            return verdict.model_copy(update={"reasons": [f"no reference: {ref_label} has no outputs"]})
        return verdict

    def accept_lengths(self, label: str, phases: Sequence[str]) -> list[float]:
        """Each measured repeat's accept length (the gate's collapse check), from the cell records kept."""
        reps = [r for e in self.entries_of(label, phases) if e.status == "ok" and e.detail.cell is not None
                for r in e.detail.cell.per_repeat]
        return [float(r.accept_length) for r in reps if r.accept_length is not None]

    def spec_of(self, label: str) -> str:
        for e in self.entries_of(label):
            if e.spec:
                return e.spec
        return Candidate.parse(label).spec
