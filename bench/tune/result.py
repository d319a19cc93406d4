"""What a tune leaves behind, and where production ends.

`write`: the bundle (the `bench run` format: manifest, one cell per label with all its repeats, request
rows, summaries and plots) in OUT/<run-id>/, plus `tune.json` (winner, cells, decision, profile file,
timings), `tune.png` (bench/tune/plot.py) and, with a winner, the profile file (bench/tune/profile_out.py).
`finish`: production back on the plan the tune started from, or on the winner (--apply), and the
winner rolled through a fleet (--fleet); one summary for a person, the wrong cells in red.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import bundle
from bench.run.cell import close_cell, new_cell
from bench.run.matrix import MatrixRun
from bench.tune import journal, order, plot, profile_out
from bench.tune.cli import check_profile_target
from bench.tune.space import Candidate
from launcher import atomic
from launcher.errors import KitError
from launcher.runtime.control_client import SyncControlClient
from launcher.runtime.states import OK_OUTCOMES

if TYPE_CHECKING:
    from bench.tune.runner import TuneRun

TUNE_JSON = "tune.json"
TUNE_PNG = "tune.png"


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "sd": None, "ci95": None, "n": 0}
    lo, hi = order.interval(values)
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "ci95": [lo, hi], "n": len(values)}


def labels(run: TuneRun) -> list[str]:
    """Every label the tune measured or planned: the running plan, the references, the candidates."""
    out = [run.incumbent.label] if run.incumbent else []
    out += [e.label for e in run.entries if e.phase == "reference"]
    out += [c.label for c in run.candidates]
    return list(dict.fromkeys(out))


def cell_summary(run: TuneRun, label: str) -> dict[str, Any]:
    """tune.json's view of one cell: its status, its numbers (screening and final), its correctness."""
    entries = run.entries_of(label)
    failed = next((e for e in entries if e.status == "failed"), None)
    verdict = run.gate(label)
    value = run.s.objective.value
    early = [value(r) for e in entries if e.status == "ok" and e.phase != "final" for r in e.repeats]
    final = [value(r) for e in entries if e.status == "ok" and e.phase == "final" for r in e.repeats]
    tokps = [r.tokps for e in entries if e.status == "ok" for r in e.repeats]
    first = entries[0] if entries else None
    params = first.spec_params if first else Candidate.parse(label).point_json()
    if failed is not None:
        status, reason = "failed", failed.reason
    elif verdict is not None and verdict["status"] != "PASS":
        status, reason = "invalid", run.failure(label)
    elif entries:
        status, reason = "measured", None
    else:
        status, reason = "skipped", "not measured: " + ("interrupted" if not run.decision else "the budget ended first")
    a, f = _stats(early), _stats(final)
    spec = first.spec if first and first.spec else Candidate.parse(label).spec
    return {
        "label": label, "profile": label.split("+", 1)[0], "spec": spec, "spec_params": params,
        "status": status, "reason": reason,
        "role": "running plan" if run.incumbent and label == run.incumbent.label else
                "reference" if any(e.phase == "reference" for e in entries) else "candidate",
        "mean": a["mean"], "sd": a["sd"], "ci95": a["ci95"], "n": a["n"],
        "final_mean": f["mean"], "final_sd": f["sd"], "final_ci95": f["ci95"], "final_n": f["n"],
        "tokps": _stats(tokps),
        "predicted_tokps": run.predictions.get(label),
        "rounds": sorted({e.round for e in entries if e.phase == "screen"}),
        "finalist": label in run.finalists,
        "plan_digest": next((e.plan_digest for e in entries if e.plan_digest), None),
        "correctness": None if verdict is None else {k: verdict.get(k) for k in
                                                     ("status", "baseline", "exact_match_rate", "first_divergence",
                                                      "accept_length", "baseline_accept_length", "reasons")},
    }


def winner_of(run: TuneRun) -> Candidate | None:
    d = run.decision
    if d is None or d.outcome != "winner":
        return None
    return Candidate.parse(d.chosen)


def tune_json(run: TuneRun, *, run_id: str, complete: bool, interrupted: bool, profile_file: str | None) -> dict:
    s, w = run.s, winner_of(run)
    decision = run.decision.to_json() if run.decision else {
        "outcome": "not reached", "chosen": run.incumbent.label if run.incumbent else None,
        "rule": "interrupted before the final comparison" if interrupted else "stopped by an error"}
    decision.update(halving_reason=run.halving_reason, finalists=run.finalists)
    elapsed = time.monotonic() - run.t0
    busy = sum(c["wall_s"] for c in run.timing.cells)
    return {
        "run_id": run_id, "complete": complete, "interrupted": interrupted, "simulated": run.simulated,
        "objective": {**s.objective.__dict__, "unit": s.objective.unit, "describe": s.objective.describe()},
        "incumbent": {"label": run.incumbent.label, **{k: run.start_plan.get(k) for k in
                                                       ("name", "spec", "spec_params", "digest")}}
        if run.incumbent else None,
        "winner": None if w is None else {"label": w.label, "profile": w.profile, "spec": w.spec,
                                          "spec_params": w.point_json()},
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
    }


def _bundle_cell(run: TuneRun, label: str, mr: MatrixRun) -> None:
    """All of a label's measured repeats as one `bench run` cell, its request rows renumbered to match."""
    entries = run.entries_of(label)
    if not entries:
        return
    first = entries[0]
    spec = first.spec or Candidate.parse(label).spec
    cell = new_cell(profile=first.profile, spec=spec, settings=run.s.run_settings(), num_prompts=len(run.prompts),
                    spec_params=first.spec_params)
    per_c: dict[int, int] = {}
    for e in entries:
        old = e.detail.get("cell") or {}
        cell.update({k: old.get(k) for k in ("plan_digest", "setup_digest", "local", "plan_spec_params", "server",
                                             "backends", "switch", "simulated") if old.get(k) is not None})
        renumber: dict[tuple[int, int], int] = {}
        for rep in old.get("per_repeat", []):
            c = int(rep.get("concurrency") or 1)
            renumber[(c, int(rep.get("repeat") or 0))] = per_c.get(c, 0)
            cell["per_repeat"].append({**rep, "repeat": per_c.get(c, 0), "tune_phase": e.phase, "tune_round": e.round})
            per_c[c] = per_c.get(c, 0) + 1
        rows = [{**r, "repeat": renumber.get((int(r.get("concurrency") or 1), int(r.get("repeat") or 0)), 0)}
                for r in e.detail.get("rows", [])]
        bundle.append_requests(mr.work_dir, cell["profile"], spec, rows, first.spec_params)
        if e.status == "failed" and not cell["invalid_reason"]:
            cell["invalid_reason"] = e.reason
        if e.detail.get("plan"):
            mr.manifest["plans"][bundle.cell_key(cell)] = e.detail["plan"]
    close_cell(cell, concurrency=run.s.concurrency, repeats=max(per_c.values(), default=0))
    verdict = run.gate(label)
    cell["correctness"] = verdict if verdict is not None else {"status": "n/a (not measured)"}
    mr.cells[bundle.cell_key(cell)] = cell


def write(run: TuneRun, *, complete: bool, interrupted: bool = False) -> Path:
    """The bundle with tune.json, tune.png and (with a winner) the profile file; returns its folder."""
    mr = MatrixRun(run.s.run_settings(), run.console)
    mr.simulated = run.simulated
    measured = [label for label in labels(run) if run.entries_of(label)]
    mr.matrix = [(e.profile, e.spec or Candidate.parse(label).spec, e.spec_params)
                 for label in measured for e in run.entries_of(label)[:1]]
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
        atomic.write_text(work_dir / TUNE_JSON, json.dumps(data, indent=2, default=str))
        plot.plot(data, work_dir / TUNE_PNG)
        if winner is not None and profile_dir is None:
            atomic.write_text(work_dir / f"{run.s.profile_name}.toml", profile_text(run, winner, mr.run_dir, data))

    path = mr.finish(complete, interrupted, gate=False, extra=extra)
    assert path is not None
    if winner is not None and profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        target = check_profile_target(profile_dir, run.s.profile_name)
        data = json.loads((path / TUNE_JSON).read_text(encoding="utf-8"))
        atomic.write_text(target, profile_text(run, winner, path, data))
    return path


def profile_text(run: TuneRun, winner: Candidate, bundle_dir: Path, data: dict[str, Any]) -> str:
    """The winner as a profile file, with the evidence in comments."""
    d = run.decision
    unit = run.s.objective.unit
    cell = next(c for c in data["cells"] if c["label"] == winner.label)
    figures = {}
    if cell["final_mean"] is not None:
        lo, hi = cell["final_ci95"] or (None, None)
        figures[unit] = f"{cell['final_mean']:.2f} (95% CI {lo:.2f}..{hi:.2f}, n={cell['final_n']} interleaved)"
    for comp in d.comparisons if d else []:
        figures[f"vs {comp.role} {comp.other}"] = f"{comp.diff_mean:+.2f} {unit} (95% bootstrap {comp.ci_low:+.2f}..{comp.ci_high:+.2f})"
    evidence = profile_out.Evidence(
        bundle=str(bundle_dir), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), figures=figures,
        host=bundle.host_fingerprint(), decision=f"{d.outcome}: {d.chosen} ({run.s.objective.describe()})" if d else "")
    return profile_out.render(run.s.profile_name, winner, evidence)


def finish(run: TuneRun, path: Path) -> int:
    """Production as promised (back, --apply, --fleet) and the summary for a person; the exit code."""
    from bench.tune.runner import restore

    data = json.loads((path / TUNE_JSON).read_text(encoding="utf-8"))
    say = run.console.print
    prefix = "SIMULATED " if run.simulated else ""
    for cell in data["cells"]:
        if cell["status"] == "invalid":
            say(f"{prefix}{cell['label']}: WRONG: {cell['reason']} (never chosen)", style="bold red")
    d = data["decision"]
    winner = winner_of(run)
    if winner is not None:
        say(f"{prefix}winner: {winner.label} ({d['rule']})", style="bold green")
        for comp in d.get("comparisons", []):
            say(f"  vs {comp['role']} {comp['other']}: {comp['diff_mean']:+.2f} (95% CI {comp['ci_low']:+.2f}.."
                f"{comp['ci_high']:+.2f}, n={comp['n_contender']}/{comp['n_other']})")
    else:
        say(f"{prefix}{d['outcome']}: {d.get('chosen')} stays")
    rc = 0
    if run.s.apply and winner is not None:
        rc = apply(run, winner, data)
    else:
        if run.s.apply:
            say("--apply: no winner, so nothing to apply; production goes back to the plan it started with")
        restore(run)
        if run.switched:
            rc = 1
    if run.s.fleet and winner is not None:
        rc = roll(run, winner) or rc
    print(f"{prefix}tune: {path / TUNE_JSON}")
    print(f"{prefix}plot: {path / TUNE_PNG}")
    if data.get("profile_file"):
        print(f"{prefix}profile: {data['profile_file']}")
    return rc


def apply(run: TuneRun, winner: Candidate, data: dict[str, Any]) -> int:
    """Switch to the profile file by name when the server reads its folder, else to the winner's plan."""
    client = SyncControlClient(run.s.control, run.token, run.s.connect_timeout)
    names = [p.get("name") for p in client.profiles()]
    if run.s.profile_name in names and data.get("profile_file"):
        profile, params, what = run.s.profile_name, None, f"profile {run.s.profile_name} ({data['profile_file']})"
    else:
        profile, params, what = winner.profile, winner.point_json(), winner.label
    code, body = client.switch(profile, winner.spec, run.s.switch_timeout, spec_params=params)
    if body.get("outcome") in OK_OUTCOMES:
        run.console.print(f"applied: production runs {what} + {winner.spec}")
        run.switched = False
        return 0
    run.console.print(f"--apply: the switch to {what} did not take (HTTP {code} {body.get('outcome')}: "
                      f"{body.get('error')}); the server kept or restored its plan", style="bold red")
    return 1


def roll(run: TuneRun, winner: Candidate) -> int:
    """--fleet: the winner's plan through every host of the fleet, one at a time (launcher/fleet/rolling.py)."""
    from launcher.fleet import fleetfile, rolling
    from launcher.profiles.spec_params import coerce

    fleet = fleetfile.load(run.s.fleet or "")
    history = rolling.default_history(Path(run.s.fleet or ""))
    try:
        return rolling.switch(fleet, winner.profile, winner.spec, history, timeout_s=run.s.switch_timeout,
                              spec_params=coerce(winner.point_json()), say=lambda t: run.console.print(t))
    except KitError as exc:  # the fleet file, a token, a host: said, and the tune's own results stand
        run.console.print(f"--fleet: {exc}", style="bold red")
        return 1
