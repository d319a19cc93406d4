"""bench/sla/table.py: the table of `bench sla` and its JSON."""

from __future__ import annotations

import json

from rich.console import Console

from bench.sla import record, table
from bench.sla.record import CellSla, Probe, SlaRecord, Targets


def _record() -> SlaRecord:
    at = Probe(rate=4.0, met=True, ttft_p99_ms=80.0, tpot_p99_ms=15.0, output_tps=500.0, per_user_tps=40.0)
    cells = [
        CellSla(cell="fused+eagle3", profile="fused", spec="eagle3", status="found", max_request_rate=4.0,
                bracket=[4.0, 4.3], probes=[Probe(rate=2.0, met=True, per_user_tps=60.0), at], correctness="PASS"),
        CellSla(cell="fused+off", profile="fused", spec="off", status="at_max", max_request_rate=8.0,
                bracket=[8.0, None], probes=[Probe(rate=2.0, met=True, per_user_tps=30.0),
                                             Probe(rate=8.0, met=True, per_user_tps=25.0)], correctness="PASS"),
        CellSla(cell="ep+off", profile="ep", spec="off", status="below_min", bracket=[None, 0.5],
                probes=[Probe(rate=0.5, met=False)], correctness="PASS"),
        CellSla(cell="ep+eagle3", profile="ep", spec="eagle3", status="invalid",
                probes=[Probe(rate=1.0, met=None, invalid_reason="restarted")],
                invalid_reason="probe at 1 req/s invalid: restarted", correctness="n/a (invalid run)"),
    ]
    return SlaRecord(targets=Targets(ttft_p99_ms=100.0, tpot_p99_ms=20.0), precision=0.1, rate_start=1.0,
                     rate_min=0.5, rate_max=8.0, burstiness=1.0, simulated=True, cells=record.with_comparisons(cells))


def test_the_table_shows_each_cells_max_rate_and_its_numbers_there():
    console = Console(record=True, width=220)
    table.render(_record(), console)
    text = console.export_text()
    assert "SIMULATED max request rate within p99 TTFT ≤ 100 ms and p99 TPOT ≤ 20 ms" in text
    assert "≥ 8 (at least --rate-max)" in text and "< 0.5 (below --rate-min)" in text and "INVALID" in text
    line = next(x for x in text.splitlines() if "fused+eagle3" in x)
    for word in ("500.0", "40.0", "80.0", "15.0", "PASS", "no (lower max rate than off)"):
        assert word in line
    assert "ep+eagle3: INVALID (probe at 1 req/s invalid: restarted)" in text


def test_json_rows_carry_each_cells_max_request_rate():
    data = json.loads(table.as_json(_record(), "results/x"))
    rows = {r["cell"]: r for r in data["cells"]}
    assert data["bundle"] == "results/x" and data["targets"] == {"ttft_p99_ms": 100.0, "tpot_p99_ms": 20.0}
    assert rows["fused+eagle3"]["max_request_rate"] == 4.0 and rows["fused+eagle3"]["speculation_helps"] is False
    assert rows["fused+off"]["status"] == "at_max" and rows["ep+off"]["max_request_rate"] is None
    assert rows["ep+eagle3"]["speculation_helps"] is None and rows["ep+eagle3"]["invalid_reason"]
    assert rows["fused+eagle3"]["ttft_p99_ms"] == 80.0 and rows["fused+eagle3"]["per_user_tps"] == 40.0


def test_tok_per_joule_only_where_energy_was_measured_and_else_why_not():
    measured = _record()
    cells = list(measured.cells)
    at = cells[0].probes[-1].model_copy(update={"tokens_per_joule": 2.5})
    cells[0] = cells[0].model_copy(update={"probes": [cells[0].probes[0], at]})
    console = Console(record=True, width=240)
    table.render(measured.model_copy(update={"cells": cells}), console)
    text = console.export_text()
    assert "tok/J" in text and "2.50" in next(x for x in text.splitlines() if "fused+eagle3" in x)
    assert json.loads(table.as_json(measured.model_copy(update={"cells": cells}), None))["cells"][0]["tokens_per_joule"] == 2.5
    console = Console(record=True, width=240)
    table.render(measured.model_copy(update={"energy_note": "nvidia-ml-py is not installed"}), console)
    text = console.export_text()
    assert "tok/J" not in text.split("no tok/J column")[0]
    assert "no tok/J column: energy not measured (nvidia-ml-py is not installed)" in text


def test_a_probe_reads_tokens_per_joule_from_the_levels_joules_per_token():
    from bench.bundle.cell_numbers import RepeatSummary
    from bench.client.request_record import RequestRecord

    reps = [RepeatSummary(repeat=0, request_rate=2.0, valid=True)]
    rows = [RequestRecord(prompt_id="p", ok=True, ttft_s=0.05, e2e_s=0.5, completion_tokens=10, request_rate=2.0,
                          repeat=0)]
    targets = Targets(ttft_p99_ms=100.0, tpot_p99_ms=100.0)
    assert record.judge(2.0, reps, rows, 1, targets, 100.0, 0.25).tokens_per_joule == 4.0
    assert record.judge(2.0, reps, rows, 1, targets, 100.0, None).tokens_per_joule is None
