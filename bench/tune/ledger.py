"""What a tune's journal says of each cell (`Ledger`): its finished entries, its outputs and its correctness
verdict against `baseline+<spec>`, the reference cell of its spec mode. bench/tune/runner.py appends to it as
cells finish; bench/tune/result.py reads it for the bundle and tune.json."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import logprob_rows
from bench.run import correctness
from bench.run.logprob_gate import Thresholds, TokenLogprob
from bench.tune import journal
from bench.tune.planning import REFERENCE_PROFILE
from bench.tune.space import Candidate

LOGPROBS = "logprobs"  # a journal entry's detail key of the cell's correctness pass


def reference_label(spec: str) -> str:
    """The reference cell of a spec mode: baseline's outputs under it."""
    return f"{REFERENCE_PROFILE}+{spec}"


class Ledger:
    """The journal entries of one tune, reused and new, in order, and what they say of each label."""

    def __init__(self, thresholds: Thresholds):
        self.thresholds = thresholds
        self.entries: list[journal.Entry] = []

    def entries_of(self, label: str, phases: Sequence[str] = journal.PHASES) -> list[journal.Entry]:
        return [e for e in self.entries if e.label == label and e.phase in phases]

    def failure(self, label: str) -> str | None:
        """Why a cell cannot be chosen: its server failed, or its output is wrong against the reference."""
        for e in self.entries_of(label):
            if e.status == "failed":
                return e.reason or "failed"
        verdict = self.gate(label)
        if verdict is not None and verdict["status"] != "PASS":
            why = "; ".join(verdict.get("reasons") or []) or verdict["status"]
            return f"wrong output: {why}" if verdict["status"] == "FAIL" else f"not verified: {why}"
        return None

    def wrong(self, label: str) -> bool:
        verdict = self.gate(label)
        return verdict is not None and verdict["status"] == "FAIL"

    def rows_of(self, label: str, phases: Sequence[str] = journal.PHASES) -> list[dict[str, Any]]:
        return [r for e in self.entries_of(label, phases) if e.status == "ok" for r in e.detail.get("rows", [])]

    def correctness_pass(self, label: str,
                         phases: Sequence[str] = journal.PHASES) -> list[tuple[str, str, list[TokenLogprob] | None]] | None:
        """The cell's correctness pass, (prompt id, text, log-probabilities or None) per prompt, from the first
        finished measurement that ran one; None before any did."""
        for e in self.entries_of(label, phases):
            passed = e.detail.get(LOGPROBS) if e.status == "ok" else None
            if isinstance(passed, list):
                return [(r["prompt_id"], str(r.get("text") or ""), logprob_rows.from_json(r.get("logprobs")))
                        for r in passed if isinstance(r, dict) and isinstance(r.get("prompt_id"), str)]
        return None

    def gate_inputs(self, label: str, phases: Sequence[str] = journal.PHASES) -> tuple[dict[str, str] | None, Any]:
        """What the gate compares of a cell: the texts and log-probabilities of its correctness pass, or, for a
        cell without one, its measured texts (in `phases`) and no log-probabilities; (None, None) before it has
        outputs. The pass is the label's, whichever phase ran it (the running plan's runs where it is measured
        in place, before its reference cell)."""
        passed = self.correctness_pass(label)
        if passed is not None:
            return {pid: text for pid, text, _ in passed}, {pid: lps for pid, _, lps in passed}
        rows = self.rows_of(label, phases)
        return (correctness.reference_outputs(rows), None) if rows else (None, None)

    def gate(self, label: str) -> dict[str, Any] | None:
        """The correctness verdict of a cell's correctness pass against baseline's under its spec mode (the
        measured texts, and no log-probabilities, when it has none); None before the cell has outputs."""
        if not self.rows_of(label):
            return None
        spec = self.spec_of(label)
        ref_label = reference_label(spec)
        accepts = self.accept_lengths(label, journal.PHASES)
        ref_acc = self.accept_lengths(ref_label, ("reference",))
        texts, lps = self.gate_inputs(label)
        ref_texts, ref_lps = self.gate_inputs(ref_label, ("reference",))
        verdict = correctness.gate(
            spec, texts or {}, sum(accepts) / len(accepts) if accepts else None, ref_texts,
            sum(ref_acc) / len(ref_acc) if ref_acc else None,
            logprobs=lps, baseline_logprobs=ref_lps, thresholds=self.thresholds,
        )
        if verdict["status"] == "n/a (no baseline)":
            verdict["reasons"] = [f"no reference: {ref_label} has no outputs"]
        return verdict

    def accept_lengths(self, label: str, phases: Sequence[str]) -> list[float]:
        """Each measured repeat's accept length (the gate's collapse check), from the cell records kept."""
        reps = [r for e in self.entries_of(label, phases) if e.status == "ok"
                for r in (e.detail.get("cell") or {}).get("per_repeat", [])]
        return [float(r["accept_length"]) for r in reps if r.get("accept_length") is not None]

    def spec_of(self, label: str) -> str:
        for e in self.entries_of(label):
            if e.spec:
                return e.spec
        return Candidate.parse(label).spec
