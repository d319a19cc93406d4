"""The matrix of `bench sla`: `bench run`'s (bench/run/matrix.py: switching, warm-up, the measuring hold, the
correctness pass and gate, the bundle), each cell measured at the rates its search chooses.

Each probe is a full open-loop level (`--repeats` repeats of `--num-prompts` arrivals at that rate, drawn from
`--seed` as `bench run --request-rate` draws them), kept in the cell's record as a `by_rate` level, so the bundle
holds every probe. After a probe's repeats the search (bench/sla/search.py) reads its pooled p99s
(bench/sla/record.py `judge`) and picks the next rate. An invalid probe (failed requests, a restarted server)
ends the cell's search: the cell is invalid with its reason, never reported at a lower rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from bench.bundle import store as bundle
from bench.bundle.names import inside
from bench.client.arrivals import Arrivals
from bench.run.cell import CellDraft
from bench.run.matrix import MatrixRun
from bench.sla import record as sla_record
from bench.sla.record import CellSla, Probe, SlaRecord, Targets
from bench.sla.search import Search
from bench.sla.settings import SlaSettings
from launcher import atomic

ESTIMATED_PROBES = 6  # the progress bar's guess of the probes per cell (doubling, then a few bisections)


@dataclass
class _CellSearch:
    search: Search
    rates: list[float] = field(default_factory=list)  # the rates handed out, in order


class SlaRun(MatrixRun):
    """One `bench sla`: a `bench run` matrix whose loads are each cell's search; `record` once finished."""

    s: SlaSettings

    def __init__(self, settings: SlaSettings, console: Console | None = None, run_id: str | None = None):
        super().__init__(settings, console, run_id)
        self.searches: dict[str, _CellSearch] = {}
        self.results: dict[str, CellSla] = {}
        self.record: SlaRecord | None = None

    def requests_per_cell(self) -> int:
        return ESTIMATED_PROBES * self.s.repeats * len(self.prompts)

    def open_loop(self) -> bool:
        return True

    def cell_rates(self, cell: CellDraft) -> Sequence[float]:
        found = self.searches.get(cell.key)
        return list(found.rates) if found is not None else []

    def cell_loads(self, cell: CellDraft) -> Iterator[int | Arrivals]:
        """The cell's probes, one at a time: each judged from what it measured before the next is chosen."""
        s = self.s
        state = _CellSearch(Search(s.rate_start, s.rate_min, s.rate_max, s.precision))
        self.searches[cell.key] = state
        while (rate := state.search.next_rate()) is not None:
            state.rates.append(rate)
            self._say(f"{cell.label}: probing {rate:g} req/s")
            yield s.arrivals_at(rate)
            probe = self._judge(cell, rate)
            if probe.met is None:
                return
            state.search.record(rate, probe.met)
            self._say(f"{cell.label}: {rate:g} req/s {'meets' if probe.met else 'misses'} the SLA "
                      f"(p99 TTFT {_ms(probe.ttft_p99_ms)}, p99 TPOT {_ms(probe.tpot_p99_ms)})")

    def _judge(self, cell: CellDraft, rate: float) -> Probe:
        rows = bundle.read_requests(self.work_dir, cell.profile, cell.spec, cell.spec_params)
        return sla_record.judge(rate, cell.per_repeat, rows, self.s.repeats, self._targets(), None)

    def _targets(self) -> Targets:
        return Targets(**self.s.targets())

    def _close_cell(self, cell: CellDraft) -> None:
        super()._close_cell(cell)
        record = self.cells[cell.key]
        state = self.searches.get(cell.key)
        rates = state.rates if state is not None else []
        rows = bundle.read_requests(self.work_dir, cell.profile, cell.spec, cell.spec_params) if rates else []
        probes = [sla_record.judge(r, cell.per_repeat, rows, self.s.repeats, self._targets(),
                                   record.rate_level(r).mean("output_throughput"),
                                   record.rate_level(r).mean("joules_per_token")) for r in rates]
        done = state is not None and state.search.next_rate() is None and all(p.met is not None for p in probes)
        result = sla_record.cell_result(
            cell=cell.label, profile=cell.profile, spec=cell.spec, spec_params=cell.spec_params, probes=probes,
            outcome=state.search.outcome() if done and state is not None else None,
            invalid_reason=None if record.valid else record.invalid_reason)
        self.results[cell.key] = result
        self._say(f"{cell.label}: {describe(result)}")

    def finish(self, complete: bool, interrupted: bool = False, *, gate: bool = True,
               extra: Callable[[Path], None] | None = None, stopped_by: str | None = None) -> Path | None:
        """`bench run`'s finish, with sla.json written into the bundle once the gate has judged every cell."""
        def write(work_dir: Path) -> None:
            self.record = self.sla_record()
            atomic.write_json(inside(work_dir, sla_record.FILE), self.record.to_json())
            if extra is not None:
                extra(work_dir)

        return super().finish(complete, interrupted, gate=gate, extra=write, stopped_by=stopped_by)

    def sla_record(self) -> SlaRecord:
        """sla.json: every cell closed so far, with its correctness verdict and speculation against off."""
        s, energy = self.s, self.manifest.get("energy") or {}
        cells = [r.model_copy(update={"correctness": self.cells[k].correctness.status if k in self.cells else None})
                 for k, r in self.results.items()]
        return SlaRecord(targets=self._targets(), precision=s.precision, rate_start=s.rate_start,
                         rate_min=s.rate_min, rate_max=s.rate_max, burstiness=s.burstiness,
                         simulated=self.simulated, cells=sla_record.with_comparisons(cells),
                         energy_note=None if energy.get("measured") else str(energy.get("reason")))


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def describe(c: CellSla) -> str:
    """A cell's search in words: its max rate, or why it has none."""
    if c.status == "invalid":
        return f"INVALID ({c.invalid_reason})"
    if c.status == "below_min":
        return f"below --rate-min ({c.bracket[1]:g} req/s misses the SLA)"
    if c.status == "at_max":
        return f"at least --rate-max ({c.max_request_rate:g} req/s meets the SLA)"
    lo, hi = c.bracket
    return f"max {lo:g} req/s meets the SLA ({hi:g} req/s misses it)"
