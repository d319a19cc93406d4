"""bench/sla/matrix.py: each cell's loads are its search's probes, one at a time, and the hooks of bench run's matrix."""

from __future__ import annotations

from bench.run.cell import new_cell
from bench.run.cli import RunArgs
from bench.run.matrix import MatrixRun
from bench.sla.cli import SlaArgs
from bench.sla.matrix import SlaRun
from bench.sla.record import Probe
from bench.sla.search import search

BASE = ["--url", "http://127.0.0.1:1", "--control", "http://127.0.0.1:2"]


def _run(tmp_path, *extra: str) -> SlaRun:
    s = SlaArgs.parse([*BASE, "--ttft-p99-ms", "100", "--tpot-p99-ms", "20", "--out", str(tmp_path), "--num-prompts",
                       "12", *extra]).settings([])
    return SlaRun(s)


def _drive(run: SlaRun, met) -> tuple[list[float], object]:
    cell = new_cell(profile="baseline", spec="off", settings=run.s, num_prompts=len(run.prompts))
    rates = []
    run._judge = lambda _cell, rate: met(rate)  # what the probe at `rate` measured
    for load in run.cell_loads(cell):
        rates.append(load.rate)
        assert load.burstiness == run.s.burstiness and load.max_concurrency == run.s.max_concurrency
    return rates, run.searches[cell.key]


def test_the_probes_are_the_searchs_rates_in_order(tmp_path):
    run = _run(tmp_path, "--rate-start", "2", "--rate-max", "100", "--precision", "0.05")
    rates, state = _drive(run, lambda r: Probe(rate=r, met=r <= 7.3))
    expected = search(lambda r: r <= 7.3, start=2.0, low=0.1, high=100.0, precision=0.05)
    assert rates == [s.rate for s in expected.steps] == state.rates
    assert state.search.outcome() == expected
    assert run.cell_rates(new_cell(profile="baseline", spec="off", settings=run.s, num_prompts=12)) == rates


def test_an_invalid_probe_ends_the_search_there(tmp_path):
    run = _run(tmp_path)
    rates, state = _drive(run, lambda r: Probe(rate=r, met=None if r >= 4 else True, invalid_reason="restarted"))
    assert rates == [1.0, 2.0, 4.0]
    assert state.search.next_rate() == 4.0  # never recorded as missing: no lower rate stands in for it


def test_the_client_has_room_for_every_arrival_and_the_pass_runs_at_1(tmp_path):
    run = _run(tmp_path)
    assert run.open_loop() and run.in_flight_room() == 12 and run.requests_per_cell() > 0
    assert run.pass_levels("fused", "off") == [1]
    assert _run(tmp_path, "--max-concurrency", "5").in_flight_room() == 5


def test_bench_run_gives_open_loop_levels_room_too(tmp_path):
    s = RunArgs.parse([*BASE, "--out", str(tmp_path), "--concurrency", "1,4"]).settings([])
    assert MatrixRun(s).in_flight_room() == 4
    s = RunArgs.parse([*BASE, "--out", str(tmp_path), "--concurrency", "2", "--num-prompts", "24",
                       "--request-rate", "8"]).settings([])
    run = MatrixRun(s)
    assert run.in_flight_room() == 24 and run.requests_per_cell() == 2 * 3 * 24
