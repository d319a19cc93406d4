"""The decision's view of a cell's repeats (`repeats_of`): at the objective's one concurrency level, or, under
`bench tune --adaptive`, across every level of `--concurrency` at once; and each level's mean tok/s
(`level_means`), from which bench/tune/adaptive.py takes each level's winner.

Across levels, a repeat's value is the geometric mean of its output tok/s at each level: a plan that is x%
faster at every level is x% faster, and a gain at one level counts as much as the same gain at another, so
the throughput of the highest level does not drown the lowest (concurrency 1, where speculation pays most).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from bench.bundle.cell_numbers import RepeatSummary
from bench.client.request_record import RequestRecord
from bench.tune.journal import Entry
from bench.tune.objective import Objective, Repeat, RequestTiming


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else float(seconds) * 1000.0


def repeat_of(rep: RepeatSummary, rows: Sequence[RequestRecord]) -> Repeat:
    """One level's repeat: tok/s, wall time, each request's TTFT/TPOT."""
    reqs = tuple(RequestTiming(ok=bool(r.ok), ttft_ms=_ms(r.ttft_s), tpot_ms=_ms(r.tpot_s),
                               output_tokens=int(r.completion_tokens or 0)) for r in rows)
    return Repeat(tokps=float(rep.output_throughput or 0.0), duration_s=float(rep.duration or 0.0), requests=reqs)


def geomean(values: Iterable[float]) -> float:
    vals = list(values)
    if not vals or any(v <= 0 for v in vals):
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def repeats_of(per_repeat: Sequence[RepeatSummary], rows: Sequence[RequestRecord],
               objective: Objective) -> tuple[Repeat, ...]:
    """The repeats the decision judges: each repeat at the objective's concurrency; with `objective.levels`, one
    per repeat index that ran at every level, its tok/s the geometric mean over the levels (its wall time and
    requests those of all its levels)."""
    def rows_at(rep: RepeatSummary) -> list[RequestRecord]:
        return [r for r in rows if r.repeat == rep.repeat and r.concurrency == rep.concurrency]

    if not objective.levels:
        return tuple(repeat_of(rep, rows_at(rep)) for rep in per_repeat if rep.concurrency == objective.concurrency)
    by_index: dict[int, dict[int, RepeatSummary]] = {}
    for rep in per_repeat:
        by_index.setdefault(int(rep.repeat or 0), {})[int(rep.concurrency or 0)] = rep
    out = []
    for index in sorted(by_index):
        at = by_index[index]
        if not all(level in at for level in objective.levels):
            continue
        parts = [repeat_of(at[level], rows_at(at[level])) for level in objective.levels]
        out.append(Repeat(tokps=geomean(p.tokps for p in parts), duration_s=sum(p.duration_s for p in parts),
                          requests=tuple(r for p in parts for r in p.requests)))
    return tuple(out)


def level_means(entries: Iterable[Entry]) -> dict[int, float]:
    """{concurrency level: mean output tok/s} over the measured repeats of a cell's entries that finished ok."""
    by_level: dict[int, list[float]] = {}
    for e in entries:
        if e.status != "ok":
            continue
        for rep in e.detail.cell.per_repeat if e.detail.cell is not None else []:
            if rep.output_throughput is not None and rep.concurrency is not None:
                by_level.setdefault(rep.concurrency, []).append(float(rep.output_throughput))
    return {level: statistics.fmean(v) for level, v in sorted(by_level.items())}
