"""What a tune leaves behind: its bundle, tune.json, tune.png and the winner's profile file.

`write`: the bundle (the `bench run` format: manifest, one cell per label with all its repeats, request
rows, summaries and plots) in OUT/<run-id>/, plus `tune.json` (winner, cells, decision, profile file,
timings), `tune.png` (bench/tune/plot.py) and, with a winner, the profile file (bench/tune/profile_out.py).
Where production ends, and the summary a person reads, are bench/tune/production.py's.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.bundle import provenance as bundle_provenance
from bench.bundle import store as bundle
from bench.bundle.schema import Correctness
from bench.run.cell import close_cell, new_cell
from bench.run.matrix import MatrixCell, MatrixRun
from bench.tune import decision as rule
from bench.tune import journal, order, paired, plot, profile_out, tune_state
from bench.tune.profile_out import check_profile_target
from bench.tune.runner import TuneRun
from bench.tune.space import Candidate
from bench.tune.tune_file import TuneCell, TuneFile
from launcher import atomic

TUNE_JSON = "tune.json"
TUNE_PNG = "tune.png"
# the keys of a cell's correctness verdict that tune.json keeps
SHOWN = ("status", "baseline", "exact_match_rate", "first_divergence", "accept_length", "baseline_accept_length",
         "reasons", "accept_note", "levels", "tolerance")


@dataclass(frozen=True)
class Figures:
    """A cell's values of one kind: their mean, sample sd, 95% interval of the mean and count."""

    mean: float | None = None
    sd: float | None = None
    ci95: tuple[float, float] | None = None
    n: int = 0


def _stats(values: list[float]) -> Figures:
    if not values:
        return Figures()
    lo, hi = order.interval(values)
    return Figures(mean=statistics.fmean(values), sd=statistics.stdev(values) if len(values) > 1 else None,
                   ci95=(lo, hi), n=len(values))


def labels(run: TuneRun) -> list[str]:
    """Every label the tune measured or planned: the running plan, the references, the candidates."""
    out = [run.incumbent.label] if run.incumbent else []
    out += [e.label for e in run.cells.entries if e.phase == "reference"]
    out += [c.label for c in run.candidates]
    return list(dict.fromkeys(out))


def cell_summary(run: TuneRun, label: str) -> TuneCell:
    """tune.json's view of one cell: its status, its numbers (screening and final), its correctness."""
    entries = run.cells.entries_of(label)
    failed = next((e for e in entries if e.status == "failed"), None)
    verdict = run.cells.gate(label)
    shown = verdict.model_dump() if verdict is not None else {}
    value = run.s.objective.value
    early = [value(r) for e in entries if e.status == "ok" and e.phase != "final" for r in e.repeats]
    final = [value(r) for e in entries if e.status == "ok" and e.phase == "final" for r in e.repeats]
    tokps = [r.tokps for e in entries if e.status == "ok" for r in e.repeats]
    first = entries[0] if entries else None
    params = first.spec_params if first else Candidate.parse(label).switch_point()
    if failed is not None:
        status, reason = "failed", failed.reason
    elif verdict is not None and verdict.status != "PASS":
        status, reason = "invalid", run.cells.failure(label)
    elif entries:
        status, reason = "measured", None
    else:
        status, reason = "skipped", "not measured: " + ("interrupted" if not run.decision else "the budget ended first")
    a, f = _stats(early), _stats(final)
    spec = first.spec if first and first.spec else Candidate.parse(label).spec
    return TuneCell.model_validate({
        "label": label, "profile": label.split("+", 1)[0], "spec": spec, "spec_params": params,
        "status": status, "reason": reason,
        "role": "running plan" if run.incumbent and label == run.incumbent.label else
                "reference" if any(e.phase == "reference" for e in entries) else "candidate",
        "mean": a.mean, "sd": a.sd, "ci95": a.ci95, "n": a.n,
        "final_mean": f.mean, "final_sd": f.sd, "final_ci95": f.ci95, "final_n": f.n,
        "tokps": asdict(_stats(tokps)),
        "predicted_tokps": run.predictions.get(label),
        "rounds": sorted({e.round for e in entries if e.phase == "screen"}),
        "finalist": label in run.finalists,
        "plan_digest": next((e.plan_digest for e in entries if e.plan_digest), None),
        "correctness": None if verdict is None else {k: shown.get(k) for k in SHOWN},
    })


CHOOSES = ("winner", "tie", rule.RUNNING_PLAN_WRONG)  # the outcomes that pick a plan (bench/tune/decision.py)


def winner_of(run: TuneRun) -> Candidate | None:
    d = run.decision
    if d is None or d.outcome not in CHOOSES:
        return None
    return Candidate.parse(d.chosen)


def paired_by_prompt(run: TuneRun) -> list[paired.PairedByPrompt]:
    """Each correct finalist against the running plan, prompt by prompt, from the final's request rows at the
    objective's concurrency (bench/tune/paired.py): reported in tune.json and the summary, not decided on."""
    d = run.decision
    if d is None or d.incumbent not in d.means:
        return []
    conc = run.s.objective.concurrency
    base = paired.per_prompt_tokps(run.cells.rows_of(d.incumbent, ("final",)), conc)
    out = []
    finalists = [k for k in d.means if k != d.incumbent and k not in d.rejected]
    for i, label in enumerate(sorted(finalists, key=lambda k: -d.means[k])):
        got = paired.paired_by_prompt(paired.per_prompt_tokps(run.cells.rows_of(label, ("final",)), conc), base,
                                      names=(label, d.incumbent), seed=d.seed + 200 + i, resamples=d.resamples,
                                      confidence=d.confidence)
        if got is not None:
            out.append(got)
    return out


def tune_json(run: TuneRun, *, run_id: str, complete: bool, interrupted: bool, profile_file: str | None) -> TuneFile:
    s, w = run.s, winner_of(run)
    decision = run.decision.to_json() if run.decision else {
        "outcome": "not reached", "chosen": run.incumbent.label if run.incumbent else None,
        "rule": "interrupted before the final comparison" if interrupted else "stopped by an error"}
    decision.update(halving_reason=run.halving_reason, finalists=run.finalists)
    elapsed = time.monotonic() - run.t0
    busy = sum(c["wall_s"] for c in run.timing.cells)
    return TuneFile.model_validate({
        "run_id": run_id, "complete": complete, "interrupted": interrupted, "simulated": run.simulated,
        "objective": {**s.objective.__dict__, "unit": s.objective.unit, "describe": s.objective.describe()},
        "incumbent": {"label": run.incumbent.label, **{k: v for k, v in run.start_plan.to_json().items()
                                                       if k in tune_state.KEPT}}
        if run.incumbent else None,
        "winner": None if w is None else {"label": w.label, "profile": w.profile, "spec": w.spec,
                                          "spec_params": point.model_dump() if (point := w.switch_point()) else None,
                                          **({"adaptive_tiers": w.tiers_json()} if w.tiers else {})},
        "cells": [cell_summary(run, label) for label in labels(run)],
        "excluded": [{"profile": x.profile, "spec": x.spec, "reason": x.reason} for x in run.excluded],
        "invalidated": [{"label": k, "why": v} for k, v in run.invalidated],
        "torn_journal_lines": run.torn,
        "decision": decision,
        "profile_file": profile_file,
        "settings": s.to_json(),
        "timing": {"budget_s": s.budget_s, "elapsed_s": elapsed, "switch_s": run.timing.switch_s,
                   "repeat_s": run.timing.repeat_s, "cells_measured": len(run.timing.cells),
                   "measuring_s": busy, "overhead_s": elapsed - busy,
                   "overhead_per_cell_s": (elapsed - busy) / len(run.timing.cells) if run.timing.cells else None},
        "journal": str(Path(s.out) / journal.JOURNAL),
        **({"adaptive": run.adaptive.to_json() if run.adaptive else {"reason": "not reached"}} if s.adaptive else {}),
    })


def _bundle_cell(run: TuneRun, label: str, mr: MatrixRun) -> None:
    """All of a label's measured repeats as one `bench run` cell, its request rows renumbered to match."""
    entries = run.cells.entries_of(label)
    if not entries:
        return
    first = entries[0]
    spec = first.spec or Candidate.parse(label).spec
    cell = new_cell(profile=first.profile, spec=spec, settings=run.s.run_settings(), num_prompts=len(run.prompts),
                    spec_params=first.spec_params)
    per_c: dict[int, int] = {}
    for e in entries:
        old = e.detail.cell
        if old is not None:
            cell.adopt(old)
        renumber: dict[tuple[int, int], int] = {}
        for rep in old.per_repeat if old is not None else []:
            c = rep.concurrency or 1
            renumber[(c, rep.repeat or 0)] = per_c.get(c, 0)
            cell.per_repeat.append(rep.model_copy(update={"repeat": per_c.get(c, 0), "tune_phase": e.phase,
                                                          "tune_round": e.round}))
            per_c[c] = per_c.get(c, 0) + 1
        rows = [r.placed(r.concurrency or 1, renumber.get((r.concurrency or 1, r.repeat or 0), 0))
                for r in e.detail.rows]
        bundle.append_requests(mr.work_dir, cell.profile, spec, rows, first.spec_params)
        if e.status == "failed" and not cell.invalid_reason:
            cell.invalid_reason = e.reason
        if e.detail.plan:
            mr.manifest["plans"][cell.key] = e.detail.plan
    passed = run.cells.correctness_pass(label)
    if passed is not None:
        bundle.write_logprobs(mr.work_dir, cell.profile, spec, passed, first.spec_params)
    record = close_cell(cell, concurrency=run.s.concurrency, repeats=max(per_c.values(), default=0))
    verdict = run.cells.gate(label)
    mr.cells[record.key] = record.with_correctness(verdict if verdict is not None else
                                                   Correctness(status="n/a (not measured)"))


def write(run: TuneRun, *, complete: bool, interrupted: bool = False) -> Path:
    """The bundle with tune.json, tune.png and (with a winner) the profile file; returns its folder."""
    if run.decision is not None and not run.decision.paired_by_prompt:  # so the summary printed after says it too
        run.decision = replace(run.decision, paired_by_prompt=paired_by_prompt(run))
    mr = MatrixRun(run.s.run_settings(), run.console)
    mr.simulated = run.simulated
    measured = [label for label in labels(run) if run.cells.entries_of(label)]
    mr.matrix = [MatrixCell(e.profile, e.spec or Candidate.parse(label).spec, e.spec_params)
                 for label in measured for e in run.cells.entries_of(label)[:1]]
    mr._start_bundle(None)
    mr.manifest["tune"] = {"journal": str(Path(run.s.out) / journal.JOURNAL)}
    for label in measured:
        _bundle_cell(run, label, mr)
    winner = winner_of(run)
    profile_dir = Path(run.s.profile_dir) if run.s.profile_dir else None
    profile_path = (profile_dir or mr.run_dir) / f"{run.s.profile_name}.toml" if winner else None

    def extra(work_dir: Path) -> None:
        data = tune_json(run, run_id=mr.run_id, complete=complete, interrupted=interrupted,
                         profile_file=str(profile_path) if profile_path else None)
        atomic.write_text(work_dir / TUNE_JSON, json.dumps(data.to_json(), indent=2, default=str))
        plot.plot(data, work_dir / TUNE_PNG)
        if winner is not None and profile_dir is None:
            atomic.write_text(work_dir / f"{run.s.profile_name}.toml", profile_text(run, winner, mr.run_dir, data))

    path = mr.finish(complete, interrupted, gate=False, extra=extra)
    assert path is not None
    if winner is not None and profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        target = check_profile_target(profile_dir, run.s.profile_name)
        data = TuneFile.read(json.loads((path / TUNE_JSON).read_text(encoding="utf-8")))
        atomic.write_text(target, profile_text(run, winner, path, data))
    return path


def profile_text(run: TuneRun, winner: Candidate, bundle_dir: Path, data: TuneFile) -> str:
    """The winner as a profile file, with the evidence in comments."""
    d = run.decision
    unit = run.s.objective.unit
    cell = data.cell(winner.label)
    figures = {}
    if cell is not None and cell.final_mean is not None:
        ci = f" (95% CI {cell.final_ci95[0]:.2f}..{cell.final_ci95[1]:.2f}," if cell.final_ci95 else " ("
        figures[unit] = f"{cell.final_mean:.2f}{ci} n={cell.final_n} final repeats)"
    for comp in d.comparisons if d else []:
        figures[f"vs {comp.role} {comp.other}"] = f"{comp.diff_mean:+.2f} {unit} (95% bootstrap {comp.ci_low:+.2f}..{comp.ci_high:+.2f})"
    evidence = profile_out.Evidence(
        bundle=str(bundle_dir), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), figures=figures,
        host=bundle_provenance.host_fingerprint(), decision=f"{d.outcome}: {d.chosen} ({run.s.objective.describe()})" if d else "")
    return profile_out.render(run.s.profile_name, winner, evidence)
