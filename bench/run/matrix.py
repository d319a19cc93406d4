"""The run loop of `bench run`: for each (profile, spec[, EAGLE-3 point]) switch, health-gate, warm up, measure.

A cell is a (profile, spec) pair, plus, for each `--eagle3 S,K,D` point, a (profile, eagle3, point)
cell switched with that point (control API `spec_params`) and labelled `profile+eagle3(S,K,D)`.

Honesty rules enforced here:
* warm-up requests are sent after every switch and never counted;
* a repeat is invalid when any request errors or its stream breaks, or when the server restarted
  during it (its /server_info per-start signals, or the control API's restart count or pid, changed);
  an invalid repeat carries its reason and no numbers, and makes its (profile, spec) invalid;
* a failed switch (rolled_back / failed) is recorded and the matrix goes on with the next cell;
* every finished cell is written at once, so an interrupt leaves a partial bundle that says
  `"complete": false`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from bench import JsonObject
from bench.bundle import names as bundle_names
from bench.bundle import provenance as bundle_provenance
from bench.bundle import store as bundle
from bench.bundle.schema import Cell
from bench.client import power
from bench.client.arrivals import Arrivals
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import Prompt, build_workload
from bench.control.hold import MeasureHold
from bench.run import correctness, logprob_gate, passes
from bench.run.cell import CellDraft, apply_gate, close_cell, new_cell
from bench.run.measure import CellMeasurer, over_cap
from bench.run.selection import no_switch_label, resolve_profiles, resolve_specs
from bench.run.server_identity import PROBE_ERRORS, is_simulated
from bench.run.settings import RunSettings
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles import running_requests
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.activation import flag_map
from launcher.runtime.api.control_client import ControlClient

EAGLE3 = "eagle3"  # the spec mode `--eagle3` points are switched under


class MatrixCell(NamedTuple):
    """One cell of the matrix: a profile, a spec mode and, for an `--eagle3` cell, its EAGLE-3 point."""

    profile: str
    spec: str
    point: SpecParams | None = None


def _progress_bar(console: Console) -> Progress:
    """The run's one progress bar: requests done of all the matrix's, time taken and left."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


class MatrixRun:
    """One `bench run`: owns the bundle folder and the cells measured so far.

    Everything is written into `OUT/.<run-id>.partial/` and renamed to `OUT/<run-id>/` once the
    summaries are written, so a bundle under its own name is always whole (complete or not)."""

    def __init__(self, settings: RunSettings, console: Console | None = None, run_id: str | None = None):
        self.s = settings
        self.console = console or Console(stderr=True)
        self.run_id = run_id or bundle_names.make_run_id()
        self.run_dir = Path(settings.out) / self.run_id  # the bundle's name once it is whole
        self.work_dir = Path(settings.out) / f".{self.run_id}.partial"  # where it is written until then
        self.prompts: list[Prompt] = build_workload(settings.workload, settings.num_prompts, settings.seed)
        self.thresholds = logprob_gate.thresholds()  # a bad KIT_GATE_* setting stops here, before anything runs
        self.cells: dict[str, Cell] = {}  # the records of the cells finished, by name
        self.matrix: list[MatrixCell] = []
        self.current: CellDraft | None = None  # the cell being measured
        self.manifest: dict[str, Any] = {}
        self.started = False
        self.simulated = False
        self.switched = False  # a switch was sent: production may have left the plan found running
        self.hold: MeasureHold | None = None  # the measuring hold (bench/control/hold.py), checked before each cell
        self._progress: Progress | None = None
        self._task: Any = None

    # ----- lifecycle -----------------------------------------------------------------------------
    def _start_bundle(self, server_status: dict[str, Any] | None, nvml: power.Nvml | str | None = None) -> None:
        host = bundle_provenance.host_fingerprint()  # before the folder exists: nothing is left behind if it fails
        self.work_dir.mkdir(parents=True, exist_ok=False)
        self.manifest = {
            "run_id": self.run_id,
            "complete": False,
            "interrupted": False,
            "simulated": False,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "finished_at": None,
            "kit": bundle_provenance.kit_info(),
            "host": host,
            "server": {"url": self.s.url, "sglang_version": None, "simulated": False},
            "control": {"url": self.s.control, "status_at_start": server_status},
            "plans": {},  # cell -> the plan the server ran for it, as its control API reported it
            "settings": self.s.to_json(),
            "gate": correctness.GateSettings().as_dict(self.thresholds),
            "matrix": [bundle_names.cell_name(p, s, sp) for p, s, sp in self.matrix],
            "energy": power.status(nvml),
        }
        bundle.write_manifest(self.work_dir, self.manifest)
        self.started = True

    def finish(self, complete: bool, interrupted: bool = False, *, gate: bool = True,
               extra: Callable[[Path], None] | None = None, stopped_by: str | None = None) -> Path | None:
        """Gate correctness over every cell (unless the caller judged it: `gate=False`), then write cells,
        manifest, `extra`'s files and the summaries (also on Ctrl-C); the folder is renamed last. A cell still being
        measured is invalid: "interrupted" on Ctrl-C, else the run stopped (`stopped_by`: the error that stopped it)."""
        if not self.started:
            return None
        if self.current is not None:
            cell = self.current
            stopped = "interrupted before this cell finished" if interrupted else (
                f"the run stopped before this cell finished: {stopped_by}" if stopped_by
                else "the run stopped before this cell finished")
            cell.invalid_reason = cell.invalid_reason or stopped
            self._close_cell(cell)
            self.current = None
        if gate:
            self._apply_gate()
        for cell in self.cells.values():
            bundle.write_cell(self.work_dir, cell)
        self.manifest.update(
            complete=complete,
            interrupted=interrupted,
            simulated=self.simulated,
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self.manifest["server"]["simulated"] = self.simulated
        bundle.write_manifest(self.work_dir, self.manifest)
        from bench.report import render as report

        if extra is not None:
            extra(self.work_dir)
        report.build(self.work_dir)
        os.rename(self.work_dir, self.run_dir)  # the run id is fresh: nothing is replaced
        self.started = False
        return self.run_dir

    def discard(self) -> None:
        """Remove the folder of a bundle that could not be finished: a bundle is whole or absent."""
        if self.started:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.started = False

    # ----- the loop ------------------------------------------------------------------------------
    async def run(self, token: str | None) -> Path:
        """Measure every cell of the matrix into a new bundle (`token`: the control API's); its folder once whole."""
        s = self.s
        async with contextlib.AsyncExitStack() as stack:
            server = await stack.enter_async_context(self._server_client())
            control = None
            if s.control:
                control = await stack.enter_async_context(
                    ControlClient(s.control, token, s.connect_timeout, url_from="--control / KIT_CONTROL_URL")
                )
            await server.preflight()
            status = None  # /status as the bundle records it
            if control is not None:
                try:
                    status = (await control.status()).to_json()
                except RuntimeFailure:
                    if s.switching or s.control_given:
                        raise
                    self._say(f"no control API answers at {s.control}; labelling the cell from the flags")
                    control = None
            info: JsonObject = {}
            with contextlib.suppress(*PROBE_ERRORS):
                info = await server.server_info()
            self.simulated = is_simulated(info)
            self.matrix = await self._plan_matrix(control, status, info)
            nvml = power.open_nvml()
            if not isinstance(nvml, str):
                stack.callback(nvml.close)
            self._start_bundle(status, nvml)
            per_cell = self.requests_per_cell()
            with _progress_bar(self.console) as progress:
                self._progress = progress
                self._task = progress.add_task("bench", total=per_cell * len(self.matrix))
                measurer = CellMeasurer(s, server, control, self.prompts, self._say, self._advance,
                                        nvml=None if isinstance(nvml, str) else nvml, loads=self.cell_loads)
                for profile, spec, point in self.matrix:
                    before = progress.tasks[0].completed
                    await self._run_cell(measurer, profile, spec, point)
                    progress.update(self._task, completed=before + per_cell)
            self._progress = None
        path = self.finish(complete=True)
        assert path is not None
        return path

    def requests_per_cell(self) -> int:
        """The timed requests of one cell (the progress bar's share of it)."""
        return (len(self.s.concurrency) + len(self.s.request_rate or ())) * self.s.repeats * len(self.prompts)

    def cell_loads(self, cell: CellDraft) -> Iterable[int | Arrivals]:
        """The loads `cell` is measured at, in order: every --concurrency level, then every --request-rate."""
        return [*self.s.concurrency, *self.s.arrivals()]

    def cell_rates(self, cell: CellDraft) -> Sequence[float]:
        """The open-loop rates `cell`'s record has levels for."""
        return self.s.request_rate or ()

    def open_loop(self) -> bool:
        """Whether the run measures open-loop levels."""
        return bool(self.s.request_rate)

    def in_flight_room(self) -> int:
        """The most requests the client may have in flight: the highest concurrency level, and with open-loop levels
        every request of a repeat (or --max-concurrency), so arrivals never wait for a connection in the client,
        where their wait would not be timed."""
        s = self.s
        room = max(s.concurrency, default=1)
        return max(room, s.max_concurrency or len(self.prompts)) if self.open_loop() else room

    def _server_client(self) -> ServerClient:
        """The client every cell is measured with: room for every request the loads put in flight at once."""
        s = self.s
        return ServerClient(
            s.url,
            api=s.api,
            max_tokens=s.max_tokens,
            ignore_eos=s.ignore_eos,
            connect_timeout=s.connect_timeout,
            concurrency=self.in_flight_room(),
            read_timeout=s.read_timeout,
            request_timeout=s.request_timeout,
        )

    async def _plan_matrix(
        self, control: ControlClient | None, status: dict[str, Any] | None, info: JsonObject
    ) -> list[MatrixCell]:
        """The cells, from the server's own lists (switching) or its running profile (--no-switch);
        each profile's spec modes first, then its `--eagle3` points."""
        s = self.s
        if not s.switching:
            return [MatrixCell(*no_switch_label(s.profiles, s.specs, status, info))]
        assert control is not None
        where = f"the control API at {s.control}"
        profiles = resolve_profiles(s.profiles or RunSettings.DEFAULT_PROFILES, await control.profiles(), where)
        modes = await control.spec_modes()
        specs = resolve_specs(s.specs or RunSettings.DEFAULT_SPECS, modes, where)
        points = list(s.eagle3 or [])
        if points and EAGLE3 not in modes:
            raise UserError(f"--eagle3 needs spec mode {EAGLE3}; {where} knows: {', '.join(modes) or '(none)'}")
        cells: list[MatrixCell] = []
        for p in profiles:
            cells += [MatrixCell(p, sp) for sp in specs]
            cells += [MatrixCell(p, EAGLE3, point) for point in points]
        labels = [bundle_names.cell_label(*c) for c in cells]
        if s.leave_on is not None and s.leave_on not in labels:
            raise UserError(f"--leave-on {s.leave_on} is not a cell of this run; its cells: {', '.join(labels)} "
                            "(nothing was switched)")
        await self._refuse_over_cap(control, cells)
        return cells

    async def _refuse_over_cap(self, control: ControlClient, cells: list[MatrixCell]) -> None:
        """A --concurrency level above a cell's running cap, as its plan's flags resolve it (POST /check's plan;
        launcher/profiles/running_requests.py: 48 under EAGLE unless --max-running-requests), is exit 2 before
        anything is switched. The server's own figure (/server_info, which the KV cache may hold lower) is
        checked again as each cell starts (measure.over_cap). A plan /check refuses is the switch's to report."""
        top = max(self.s.concurrency, default=0)
        for profile, spec, point in cells:
            answer = await control.check(profile, spec, point)
            plan = answer.plan if answer.ok else None
            if plan is None:
                continue
            cap, _ = running_requests.resolve(flag_map([str(f) for f in plan.flags]))
            if cap is not None and top > cap:
                refused = over_cap(self.s.concurrency, cap, bundle_names.cell_label(profile, spec, point),
                                   "as its plan's flags resolve it")
                raise UserError(f"{refused} (nothing was switched)")

    def _advance(self, _: RequestRecord) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def _say(self, text: str) -> None:
        prefix = "SIMULATED " if self.simulated else ""
        self.console.print(f"{prefix}{text}", highlight=False, soft_wrap=True)

    async def _run_cell(self, measurer: CellMeasurer, profile: str, spec: str,
                        point: SpecParams | None = None) -> None:
        s = self.s
        if self.hold is not None:
            self.hold.check()
        cell = new_cell(profile=profile, spec=spec, settings=s, num_prompts=len(self.prompts), spec_params=point)
        self.current = cell
        self.switched = self.switched or s.switching
        if self._progress is not None:
            label = "SIMULATED " if self.simulated else ""
            self._progress.update(self._task, description=f"{label}{cell.label}")

        def on_plan(plan: JsonObject) -> None:
            self.manifest["plans"][cell.key] = plan

        info = await measurer.fill(
            cell, repeats=s.repeats, on_plan=on_plan,
            on_rows=lambda rows: bundle.append_requests(self.work_dir, profile, spec, rows, point),
            on_logprobs=lambda rows: bundle.write_logprobs(self.work_dir, profile, spec, rows, point),
            top_k=self.thresholds.top_k, pass_levels=self.pass_levels(profile, spec),
        )
        self.simulated = self.simulated or cell.simulated
        if info and self.manifest["server"]["sglang_version"] is None:
            self.manifest["server"]["sglang_version"] = info.get("version")
        self._close_cell(cell)

    def pass_levels(self, profile: str, spec: str) -> list[int]:
        """The concurrency levels of a cell's correctness pass (bench/run/passes.py): the reference's also give
        the null. `bench run` switches to the spec overlay's own adaptive tiers."""
        keys = passes.tier_keys_of(spec, None)
        measured = self.s.concurrency or [1]  # open-loop levels only: the pass at 1, as by default
        if profile == correctness.BASELINE:
            return passes.reference_levels(measured, keys)
        return passes.levels(measured, keys)

    def _close_cell(self, cell: CellDraft) -> None:
        record = close_cell(cell, concurrency=self.s.concurrency, repeats=self.s.repeats, rates=self.cell_rates(cell))
        self.cells[record.key] = record
        if self.current is cell:
            self.current = None
        bundle.write_cell(self.work_dir, record)
        verdict = "valid" if record.valid else f"INVALID ({record.invalid_reason})"
        tps = record.first_level().mean("output_throughput")
        detail = f", {tps:.1f} tok/s" if record.valid and tps is not None else ""
        self._say(f"{record.label}: {verdict}{detail}")

    def _apply_gate(self) -> None:
        self.cells = apply_gate(run_dir=self.work_dir, cells=self.cells, thresholds=self.thresholds)
