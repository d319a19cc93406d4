"""The loop of `bench tune` (`TuneRun`): measure, journal, halve, decide. bench/tune/cli.py `tune` runs
it, then writes the results (bench/tune/result.py) and puts production back or applies the winner
(bench/tune/production.py), whatever happened.

Order of work (docs/tune.md):
1. read the running plan: it is the plan to beat and the plan production goes back to; the first run
   of a tune records it in OUT/tune-state.json, so a run resumed after SIGKILL still knows it; the
   candidates are checked against the server before anything is switched (bench/tune/planning.py);
2. measure the running plan where it runs (no switch): its screening repeats, and the time a repeat
   takes; with the last switch's time from /status history, a budget that cannot hold the smallest
   honest tune (order.minimum) is exit 2 before anything is switched, else after the first switch;
3. one reference cell per spec mode, `baseline+<spec>`: the outputs every cell is gated against;
4. every profile's most promising candidate, then successive halving over the rest, most promising
   first (bench/tune/order.py), keeping time for the final comparison; only screened candidates reach it;
   with --adaptive, the tiers written from each level's winner join them (bench/tune/adaptive.py);
5. the finalists and the running plan in blocks, mirrored (bench/tune/schedule.py): a few switches;
6. the decision (bench/tune/decision.py), the bundle, tune.json, the plot and the profile file
   (bench/tune/result.py);
7. production back on the plan it started with, or on the winner with --apply; --fleet rolls it
   (bench/tune/production.py).

Every finished cell is one journal line (bench/tune/journal.py), so the same command resumes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from bench import JsonObject
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import build_workload
from bench.control.hold import MeasureHold
from bench.control.production import PlanRef
from bench.run import logprob_gate, passes
from bench.run.cell import close_cell, new_cell
from bench.run.measure import CellMeasurer
from bench.run.passes import Reply
from bench.run.server_identity import PROBE_ERRORS, is_simulated
from bench.tune import adaptive, cell_entry, journal, order, outside, schedule, space, tune_state
from bench.tune.decision import Decision, decide
from bench.tune.ledger import Ledger, reference_label
from bench.tune.planning import REFERENCE_PROFILE, plan_space
from bench.tune.progress import TuneProgress
from bench.tune.settings import TuneSettings
from bench.tune.space import Candidate
from bench.tune.timing import Timing
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api.bodies import ServerStatus
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import ANSWERING, Outcome


class TuneRun:
    """One invocation of `bench tune` (a resumed one included)."""

    def __init__(self, s: TuneSettings, token: str, console: Console):
        self.s, self.token, self.console = s, token, console
        self.out = Path(s.out)
        self.prompts = build_workload(s.workload, s.num_prompts, s.seed)
        self.timing = Timing()
        self.t0 = time.monotonic()
        self.deadline = self.t0 + s.budget_s
        self.simulated = False
        self.hashes: dict[str, str] = {}
        self.settings_digest = ""
        self.start_plan = PlanRef(None, None)
        self.incumbent: Candidate | None = None
        self.candidates: list[Candidate] = []
        self.ordered: list[Candidate] = []
        self.predictions: dict[str, float] = {}
        self.plan_digests: dict[str, str] = {}  # label -> the digest the server would run (POST /check)
        self.excluded: list[space.Excluded] = []
        self.invalidated: list[tuple[str, str]] = []
        self.torn = 0
        self.halving_reason = ""
        self.finalists: list[str] = []
        self.decision: Decision | None = None
        self.progress: TuneProgress | None = None
        self.thresholds = logprob_gate.thresholds()  # a bad KIT_GATE_* setting is exit 2 before anything is switched
        self.cells = Ledger(self.thresholds, self.s.api)  # the journal entries, reused and new, and their verdicts
        self.switched = False  # production left its starting plan at least once
        self.hold: MeasureHold | None = None  # the measuring hold (bench/control/hold.py), checked before each cell
        self.adaptive: adaptive.AdaptivePlan | None = None  # --adaptive: the tiers and the candidate built from them

    # ----- small helpers ---------------------------------------------------------------------------
    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str, style: str | None = None) -> None:
        prefix = "SIMULATED " if self.simulated else ""
        self.console.print(f"{prefix}{text}", style=style, highlight=False, markup=False, soft_wrap=True)

    def states(self) -> dict[str, order.CellState]:
        """The planner's view: screening tok/s per candidate, or why it left the race."""
        out: dict[str, order.CellState] = {}
        for c in self.candidates:
            values = tuple(self.s.objective.value(r) for e in self.cells.entries_of(c.label, ("reference", "screen"))
                           if e.status == "ok" for r in e.repeats)
            out[c.label] = order.CellState(values, self.cells.failure(c.label))
        return out

    # ----- state that survives the process ----------------------------------------------------------
    def load_state(self, plan: PlanRef) -> PlanRef:
        """The plan this tune started from (bench/tune/tune_state.py): the recorded one when OUT/ holds this
        tune unfinished, else the running plan, recorded now. A resumed tune whose production was left elsewhere
        puts it back at the end, whatever this run switches. A finished tune is no resume: this run decides
        again from its journal against the plan that runs now (its cells reused where still valid)."""
        data = tune_state.read(self.out, self.settings_digest)
        if data and data.get("finished"):
            self.say(f"found a finished tune in {self.out} ({data.get('result') or 'results'}): deciding again from its "
                     f"journal against the plan that runs now, {plan.name}+{plan.spec} (--fresh "
                     "measures afresh)")
            data = None
        if not data:
            return tune_state.record(self.out, self.settings_digest, plan)
        start = PlanRef.from_json(data["start_plan"])
        if start.digest != plan.digest:
            self.say(f"resuming: production was left on {plan.name}+{plan.spec}; the tune started "
                     f"from {start.name}+{start.spec} and goes back to it")
            self.switched = True  # the earlier run's switch: production goes back at the end
        return start

    def mark_finished(self, written: Path) -> None:
        tune_state.mark_finished(self.out, self.settings_digest, written)

    def record(self, entry: journal.Entry) -> None:
        journal.record(self.out, entry)
        self.cells.entries.append(entry)

    # ----- measuring one cell ---------------------------------------------------------------------
    async def measure(self, measurer: CellMeasurer, cand: Candidate, repeats: int, *, phase: journal.Phase,
                      rnd: int = 0, switch: bool = True, spec_params: SpecParams | None = None,
                      disturbed: int = 0) -> journal.Entry:
        """Switch (unless measuring in place), warm up, `repeats` repeats; one journal line either way. A cell
        that a switch from outside made invalid is measured again (switching back), not recorded."""
        if self.hold is not None:
            self.hold.check()
        params = spec_params if spec_params is not None else cand.switch_point()
        if self.progress is not None:
            self.progress.cell(cand.label, "switching" if switch else "warming up", phase, rnd)
        m = replace(measurer, settings=self.s.run_settings(switching=switch))
        cell = new_cell(profile=cand.profile, spec=cand.spec, settings=m.settings, num_prompts=len(self.prompts),
                        spec_params=params, adaptive_tiers=cand.tiers_json())
        rows: list[RequestRecord] = []
        plan: JsonObject = {}
        passed: list[JsonObject] = []  # the correctness pass, run the first time a label is measured

        def on_logprobs(result: Sequence[Reply]) -> None:
            passed.extend(r.to_json() for r in result)

        first = self.cells.correctness_pass(cand.label) is None
        known = await outside.switch_ids(m.control)
        t0 = time.monotonic()
        if switch:
            self.switched = True
        info = await m.fill(cell, repeats=repeats, on_rows=rows.extend, on_plan=plan.update,
                            on_logprobs=on_logprobs if first else None, top_k=self.thresholds.top_k,
                            pass_levels=self.pass_levels(cand))
        wall = time.monotonic() - t0
        self.simulated = self.simulated or is_simulated(info) if info else self.simulated
        record = close_cell(cell, concurrency=self.s.concurrency, repeats=repeats)
        moved = [] if record.valid else await outside.since(m.control, known, (record.switch or {}).get("id"),
                                                                self.s.switch_timeout)
        if moved:
            what = f"{cand.label}: switched from outside while measured ({outside.describe(moved)})"
            if disturbed + 1 >= outside.REMEASURE_MAX:
                raise RuntimeFailure(f"{what}, {disturbed + 1} times in a row; stop whoever switches the server, "
                                     "then run the same command again to resume")
            self.say(f"{what}: measured again", style="yellow")
            return await self.measure(measurer, cand, repeats, phase=phase, rnd=rnd, switch=True,
                                      spec_params=spec_params, disturbed=disturbed + 1)
        measured = sum(float(r.duration or 0.0) for r in record.per_repeat)
        restarted = switch and (record.switch or {}).get("outcome") == Outcome.SWITCHED  # unchanged: free
        self.timing.observe(wall, measured, restarted, repeats if record.valid else 0)
        detail = journal.Detail(cell=record, rows=rows, plan=plan, wall_s=wall, measure_s=measured,
                                logprobs=passed if first and record.valid else None)
        entry = cell_entry.entry_of(cand, record, rows, detail, phase=phase, rnd=rnd, spec_params=params,
                                    objective=self.s.objective, hashes=self.hashes,
                                    settings_digest=self.settings_digest)
        self.record(entry)
        self.report(entry)
        return entry

    def pass_levels(self, cand: Candidate) -> list[int]:
        """The concurrency levels of a cell's correctness pass (bench/run/passes.py); the reference's also give
        the null and cover every level a tuned adaptive plan's tiers are keyed at."""
        keys = passes.tier_keys_of(cand.spec, cand.tiers_json())
        if cand.profile == REFERENCE_PROFILE:
            return passes.reference_levels(self.s.concurrency, keys)
        return passes.levels(self.s.concurrency, keys)

    def report(self, entry: journal.Entry) -> None:
        """One line per finished cell; a wrong one in red."""
        where = f"{entry.phase}" + (f" r{entry.round}" if entry.phase == "screen" else "")
        if entry.status == "failed":
            self.say(f"{entry.label} [{where}]: FAILED ({entry.reason})", style="yellow")
            return
        values = [self.s.objective.value(r) for r in entry.repeats]
        mean = sum(values) / len(values) if values else 0.0
        line = f"{entry.label} [{where}]: {mean:.1f} {self.s.objective.unit} over {len(values)} repeat(s)"
        if entry.phase != "reference" and self.cells.wrong(entry.label):
            self.say(f"{line}: WRONG ({self.cells.failure(entry.label)}): never chosen", style="bold red")
        else:
            self.say(line)

    # ----- the phases ------------------------------------------------------------------------------
    async def run(self) -> Decision:
        s = self.s
        async with contextlib.AsyncExitStack() as stack:
            server = await stack.enter_async_context(ServerClient(
                s.url, api=s.api, max_tokens=s.max_tokens, ignore_eos=False, connect_timeout=s.connect_timeout,
                concurrency=max(s.concurrency), read_timeout=s.read_timeout, request_timeout=s.request_timeout))
            control = await stack.enter_async_context(
                ControlClient(s.control, self.token, s.connect_timeout, url_from="--control / KIT_CONTROL_URL"))
            status = await control.wait_idle(s.switch_timeout)  # a switch left running by a stopped tune ends first
            if status.state not in ANSWERING:  # restarting (after a kill mid-switch): wait for it
                await server.wait_healthy(s.health_timeout)
            await server.preflight()
            plan = await control.running_plan()
            running = PlanRef.from_json(plan.to_json()) if plan is not None else None  # as tune_state records it
            if running is None:
                raise RuntimeFailure(f"the control API at {s.control} reports no running plan; wait until it serves")
            with contextlib.suppress(*PROBE_ERRORS):
                self.simulated = is_simulated(await server.server_info())
            sp = await plan_space(s, control, self.say)
            self.candidates, self.excluded, self.ordered = sp.candidates, sp.excluded, order.breadth_first(sp.ordered)
            self.say("order: " + ", ".join(f"{c.label} ({sp.predictions[c.label]:.0f})" for c in self.ordered)
                     + " (predicted tok/s; every profile's best first)")
            self.predictions, self.plan_digests = sp.predictions, sp.plan_digests
            # the correctness pass's top-k too: a pass asked for fewer alternatives cannot be reused for more
            self.settings_digest = journal.settings_digest({**s.measuring(), "overlays": cell_entry.overlay_hash(s.reference_specs()),
                                                            "logprob_top_k": self.thresholds.top_k})
            if s.fresh:
                for src, dst in tune_state.set_aside(self.out):
                    self.say(f"--fresh: {src} kept as {dst.name}")
            self.start_plan = self.load_state(running)
            self.incumbent = Candidate.of_plan(self.start_plan)
            self.hashes = {n: cell_entry.profile_hash(n) for n in {c.profile for c in self.candidates}
                           | {self.incumbent.profile, REFERENCE_PROFILE}}
            resumed = journal.resume(self.out, profile_hashes=self.hashes, settings_digest=self.settings_digest,
                                     plan_digests=self.plan_digests)
            self.cells.entries, self.invalidated, self.torn = list(resumed.entries), resumed.invalidated, resumed.torn
            if self.cells.entries:
                self.say(f"resuming: {len(self.cells.entries)} finished cell(s) reused from {self.out / journal.JOURNAL}"
                         + (f", {len(self.invalidated)} measured again" if self.invalidated else ""))
            for label, why in dict.fromkeys(self.invalidated):  # one line per cell and reason
                self.say(f"{label}: measured again ({why})")
            with TuneProgress(self.console, s.budget_s, self.t0) as progress:
                self.progress = progress
                measurer = CellMeasurer(s.run_settings(), server, control, self.prompts, self.say,
                                        on_phase=progress.phase)
                await self.measure_in_place(measurer, status, running)
                await self.references(measurer)
                await self.screen(measurer)
                if s.adaptive:
                    await self.add_adaptive(control)
                await self.final(measurer)
            self.progress = None
        self.decision = self.decide()
        return self.decision

    async def measure_in_place(self, measurer: CellMeasurer, status: ServerStatus, running: PlanRef) -> None:
        """The running plan's screening repeats where it runs, with the budget checked before and after them."""
        assert self.incumbent is not None
        inc = self.incumbent
        last = [h for h in status.history if h.outcome in (Outcome.SWITCHED, Outcome.STARTED)
                and h.durations.get("total_s")]
        if last and self.timing.switch_s is None:
            self.timing.switch_s = float(last[-1].durations["total_s"])
            self.check_minimum()  # the switches alone (no repeat timed yet): a budget they overrun measures nothing
        if running.digest == self.start_plan.digest and not self.cells.entries_of(inc.label, ("screen",)):
            await self.measure(measurer, inc, self.s.screen_repeats, phase="screen", switch=False,
                               spec_params=self.start_plan.spec_params)
        if self.timing.repeat_s is not None:  # a switch not timed yet counts as free: a lower bound
            self.check_minimum()

    def check_minimum(self) -> None:
        """Exit 2 when the rest of the budget cannot hold the smallest honest tune at the measured costs."""
        assert self.incumbent is not None
        sw, rep = self.timing.switch_s or 0.0, self.timing.repeat_s or 0.0
        specs = dict.fromkeys([*self.s.reference_specs(), self.incumbent.spec])
        refs = sum(1 for spec in specs if not self.cells.entries_of(reference_label(spec), ("reference",)))
        screened = {c.profile for c in self.candidates if self.cells.entries_of(c.label, ("screen",))}
        profiles = len({c.profile for c in self.candidates} - screened)
        arms = min(self.s.finalists, len(self.candidates)) + 1 + self.s.adaptive
        need = order.minimum(switch_s=sw, repeat_s=rep, references=refs, profiles=profiles,
                             screen_repeats=self.s.screen_repeats, final_arms=arms,
                             final_repeats=self.s.final_repeats, blocks=self.s.final_blocks)
        problem = need.problem(self.remaining(), self.s.budget_s, sw, rep)
        if problem:
            raise UserError(problem)

    async def references(self, measurer: CellMeasurer) -> None:
        """baseline+<spec> for every spec mode in play: the outputs each cell is gated against."""
        assert self.incumbent is not None
        specs = list(dict.fromkeys([*self.s.reference_specs(), self.incumbent.spec]))
        for spec in specs:
            label = reference_label(spec)
            if self.cells.entries_of(label, ("reference",)):
                continue
            timed = self.timing.switch_s is not None
            await self.measure(measurer, Candidate(REFERENCE_PROFILE, spec), self.s.screen_repeats, phase="reference")
            if not timed and self.timing.switch_s is not None and self.timing.repeat_s is not None:
                self.check_minimum()  # the first switch timed: production goes back before exit 2 (cli.py)

    def final_runs(self, arms: Sequence[str]) -> list[schedule.Run]:
        return schedule.mirrored(list(arms), self.s.final_repeats, self.s.final_blocks)

    def final_reserve(self) -> float:
        """Time kept for the final: finalists and the running plan in blocks, one switch per block."""
        arms = [f"arm{i}" for i in range(min(self.s.finalists, len(self.candidates)) + 1 + self.s.adaptive)]
        return schedule.cost_s(self.final_runs(arms), self.timing.switch_s or 0.0, self.timing.repeat_s or 0.0)

    async def screen(self, measurer: CellMeasurer) -> None:
        """Successive halving (bench/tune/order.py) within the budget less the final's reserve."""
        halving = order.Halving(screen_repeats=self.s.screen_repeats, finalists=self.s.finalists)
        heads = self.ordered[:len({c.profile for c in self.ordered})]  # every profile's first (breadth_first)
        for cand in heads:  # screened whatever the final's reserve says: the minimum check promised them
            if not self.cells.entries_of(cand.label, ("screen", "reference")):
                await self.measure(measurer, cand, self.s.screen_repeats, phase="screen")
        while True:
            nb = order.next_batch(self.ordered, self.states(), remaining_s=self.remaining() - self.final_reserve(),
                                  switch_s=self.timing.switch_s or 0.0, repeat_s=self.timing.repeat_s or 0.0,
                                  halving=halving)
            if self.progress is not None:
                self.progress.plan(nb.cost_s + self.final_reserve())
            if nb.done:
                self.halving_reason = nb.reason
                states = self.states()  # a candidate never screened never reaches the final
                alive = [c for c in nb.survivors if not states[c.label].failed and states[c.label].tokps]
                alive.sort(key=lambda c: -order.screen_mean(states[c.label].tokps))
                self.finalists = [c.label for c in alive[: self.s.finalists]]
                return
            batch = nb.batch if self.timing.switch_s is not None else nb.batch[:1]  # a switch not yet timed
            for cand, n in batch:
                await self.measure(measurer, cand, n, phase="screen", rnd=nb.round)

    async def add_adaptive(self, control: ControlClient) -> None:
        """--adaptive: SGLang's adaptive config from each level's winner (bench/tune/adaptive.py), checked with the
        server (POST /check), joins the final as one more finalist, next to the running plan in the mirrored order
        (bench/tune/schedule.py), where its runs stay one block each."""
        built = adaptive.sharing_a_cell(adaptive.build(self.cells, self.candidates, self.s.concurrency),
                                        [*self.candidates, *filter(None, [self.incumbent])])
        self.adaptive, digest = await adaptive.checked(built, control)
        cand = self.adaptive.candidate
        self.say(self.adaptive.describe(), style=None if cand else "yellow")
        if cand is not None and digest is not None:
            self.plan_digests[cand.label] = digest
            self.candidates.append(cand)
            self.finalists.insert(0, cand.label)

    async def final(self, measurer: CellMeasurer) -> None:
        """The finalists and the running plan in mirrored blocks (bench/tune/schedule.py); a final the budget
        cuts short is decided on the repeats it has."""
        assert self.incumbent is not None
        # the running plan first: its runs sit at both ends and in the middle of the mirrored schedule
        arms = list(dict.fromkeys([self.incumbent.label, *self.finalists]))
        if len(arms) < 2:
            return
        by_label = {c.label: c for c in [*self.candidates, self.incumbent]}
        done = {a: sum(len(e.repeats) for e in self.cells.entries_of(a, ("final",)) if e.status == "ok") for a in arms}
        runs = schedule.remaining(self.final_runs(arms), done)
        for i, run in enumerate(runs):
            if self.cells.failure(run.arm):
                continue
            sw, rep = self.timing.switch_s or 0.0, self.timing.repeat_s or 0.0
            if self.progress is not None:
                self.progress.plan(schedule.cost_s(runs[i:], sw, rep))
            n = min(run.repeats, int((self.remaining() - sw) // rep) if rep > 0 else run.repeats)
            if n < 1:
                self.say(f"the budget ends the final after {i} of {len(runs)} blocks: deciding on the repeats it has")
                return
            params = self.start_plan.spec_params if run.arm == self.incumbent.label else None
            await self.measure(measurer, by_label[run.arm], n, phase="final", rnd=run.block + 1, spec_params=params)

    def decide(self) -> Decision:
        """The rule over the final interleaved values; rejected: every arm that failed or is wrong."""
        assert self.incumbent is not None
        labels = {c.label for c in self.candidates} | {self.incumbent.label}
        # one list per final run (one switch): the decision resamples runs, then their repeats
        samples = {label: [[self.s.objective.value(r) for r in e.repeats]
                           for e in self.cells.entries_of(label, ("final",)) if e.status == "ok" and e.repeats]
                   for label in labels}
        samples = {k: v for k, v in samples.items() if v}
        rejected = {label: why for label in labels if (why := self.cells.failure(label))}
        return decide(samples, self.incumbent.label, rejected=rejected, objective=self.s.objective, seed=self.s.seed,
                      incumbent_wrong=self.cells.wrong(self.incumbent.label),
                      fallback=reference_label(self.incumbent.spec))
