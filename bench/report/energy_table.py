"""summary.md's energy section and energy.csv: per cell and load, joules per output token, average watts (every
GPU together) and tokens per joule, from the repeats' NVML readings (bench/client/power.py); where the run could
not measure energy, one line saying why, and no columns."""

from __future__ import annotations

from bench.bundle import names as bundle_names
from bench.bundle.cell_numbers import Level
from bench.bundle.schema import Cell, Manifest
from bench.client.arrivals import rate_text
from bench.report import tables
from bench.report.tables import fmt

CSV_FILE = "energy.csv"
CSV_FIELDS = ["cell", "load", "joules_per_token", "average_watts", "tokens_per_joule", "energy_method"]


def _levels(cell: Cell) -> list[tuple[str, Level]]:
    return ([(f"c={c}", cell.level(c)) for c in cell.concurrency_levels]
            + [(f"rate={rate_text(r)}", cell.rate_level(r)) for r in cell.rate_levels])


def rows(cells: list[Cell]) -> list[dict[str, object]]:
    """One row per valid cell and load that has an energy reading."""
    out: list[dict[str, object]] = []
    for c in cells:
        methods = sorted({r.energy_method for r in c.per_repeat if r.valid and r.energy_method})
        for load, level in _levels(c):
            jpt = level.mean("joules_per_token")
            if not c.valid or jpt is None:
                continue
            out.append({"cell": bundle_names.cell_label(c.profile, c.spec, c.spec_params), "load": load,
                        "joules_per_token": jpt, "average_watts": level.mean("average_watts"),
                        "tokens_per_joule": 1 / jpt if jpt > 0 else None, "energy_method": ",".join(methods)})
    return out


def markdown_lines(manifest: Manifest, cells: list[Cell]) -> list[str]:
    """The section: nothing for a bundle older than energy, the reason when not measured, else the table."""
    energy = manifest.energy
    if energy is None:
        return []
    if not energy.measured:
        return ["", f"Energy: not measured ({energy.reason or 'no reason recorded'}); no energy columns."]
    lines = ["", f"## Energy (NVML, {energy.gpus} GPU(s) together)", "",
             "| cell | load | J / output token | average W | tok / J | method |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['cell']} | {r['load']} | {fmt(r['joules_per_token'], 3)} | {fmt(r['average_watts'], 0)} "
              f"| {fmt(r['tokens_per_joule'], 2)} | {r['energy_method']} |" for r in rows(cells)]
    return lines


def csv_text(manifest: Manifest, cells: list[Cell]) -> str | None:
    """energy.csv, or None when the run measured no energy."""
    if manifest.energy is None or not manifest.energy.measured:
        return None
    return tables.csv_text(rows(cells), CSV_FIELDS)
