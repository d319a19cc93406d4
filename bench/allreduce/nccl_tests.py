"""nccl-tests' all_reduce_perf beside the kit: same sizes, same environment, same call counts.

One single-process run per size (`-g NRANKS`, one thread driving every GPU), with the kit's numbers of
calls: eager `-n ITERS -w WARMUP`; graph `-n GRAPH_CALLS -G GRAPH_LAUNCHES`, as the kit captures
GRAPH_CALLS calls and replays the graph GRAPH_LAUNCHES times. `-a 1` averages the time over ranks
(its default, stated) and `-c 1` checks the result. The kit compares its in-place all-reduce with
nccl-tests' in-place columns. The binary is found through --nccl-tests-bin, KIT_NCCL_TESTS_BIN (the
server image sets it) or PATH; docker/build-nccl-tests.sh builds it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench.allreduce.records import ResultRow, RunSettings
from launcher import settings
from launcher.errors import UserError

BINARY = "all_reduce_perf"
NCCL_BACKENDS = ("nccl", "nccl-direct")  # the kit's rows that nccl-tests measures the same thing as
DTYPE = {"bf16": "bfloat16", "fp16": "half", "fp32": "float"}
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$")
_VERSION = re.compile(r"nccl-tests version (\S+).*?nccl-library=(\d+)")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Half(_Record):
    """One half of a result row: out-of-place or in-place. `wrong` is None without -c 1 (N/A)."""

    time_us: float
    algbw_GBps: float | None
    busbw_GBps: float | None
    wrong: int | None


class PerfRow(_Record):
    """One result row of all_reduce_perf's stdout."""

    size_B: int
    count: int
    type: str
    out_of_place: Half
    in_place: Half


class PerfOutput(_Record):
    """all_reduce_perf's stdout: its result rows and the versions it names."""

    rows: list[PerfRow]
    nccl_tests_version: str | None
    nccl_library: str | None


class SizeResult(_Record):
    """One size's all_reduce_perf run: its row and versions, or why it failed; its command and log."""

    size_B: int
    command: str
    log: str
    status: Literal["ok", "failed"]
    reason: str | None = None
    row: PerfRow | None = None
    nccl_tests_version: str | None = None
    nccl_library: str | None = None


def find_binary(explicit: str | None) -> Path:
    """--nccl-tests-bin, else KIT_NCCL_TESTS_BIN, else all_reduce_perf on PATH; UserError (exit 2) if none."""
    given = explicit or (str(settings.KIT_NCCL_TESTS_BIN.get()) if settings.KIT_NCCL_TESTS_BIN.get() else None)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UserError(f"nccl-tests binary {path} is not an executable file; build it with "
                            "docker/build-nccl-tests.sh SRC PREFIX, or fix --nccl-tests-bin / KIT_NCCL_TESTS_BIN")
        return path
    found = shutil.which(BINARY)
    if found is None:
        raise UserError(f"--with-nccl-tests: {BINARY} is not on PATH and neither --nccl-tests-bin nor "
                        f"{settings.KIT_NCCL_TESTS_BIN.name} names it; the server image has it, elsewhere build it "
                        "with docker/build-nccl-tests.sh SRC PREFIX")
    return Path(found)


def command(binary: Path, size: int, run: RunSettings) -> list[str]:
    """all_reduce_perf for one size with the kit's run settings (`nranks`, `dtype`, `graph`, call counts)."""
    cmd = [str(binary), "-b", str(size), "-e", str(size), "-g", str(run.nranks), "-d", DTYPE[run.dtype],
           "-o", "sum", "-c", "1", "-a", "1", "-w", str(run.warmup)]
    if run.graph:
        return [*cmd, "-n", str(run.graph_calls), "-G", str(run.graph_launches)]
    return [*cmd, "-n", str(run.iters)]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _half(part: list[str]) -> Half | None:
    """`time algbw busbw #wrong`; None when the time is not a number."""
    time_us, algbw, busbw = (_number(x) for x in part[:3])
    if time_us is None:
        return None
    return Half(time_us=time_us, algbw_GBps=algbw, busbw_GBps=busbw,
                wrong=None if part[3] == "N/A" else int(float(part[3])))


def _perf_row(line: str) -> PerfRow | None:
    m = _ROW.match(line)
    if not m:
        return None
    rest = m.group(6).split()
    if len(rest) < 8:
        return None
    out_of_place, in_place = _half(rest[:4]), _half(rest[4:8])
    if out_of_place is None or in_place is None:
        return None
    return PerfRow(size_B=int(m.group(1)), count=int(m.group(2)), type=m.group(3), out_of_place=out_of_place,
                   in_place=in_place)


def parse(text: str) -> PerfOutput:
    """The result rows and the versions from all_reduce_perf's stdout.

    A row is `size count type redop root` then out-of-place `time algbw busbw #wrong` and in-place
    `time algbw busbw #wrong` (#wrong is N/A without -c 1).
    """
    rows = [row for row in map(_perf_row, text.splitlines()) if row is not None]
    version = _VERSION.search(text)
    return PerfOutput(rows=rows, nccl_tests_version=version.group(1) if version else None,
                      nccl_library=version.group(2) if version else None)


def run_sizes(binary: Path, run: RunSettings, env: dict[str, str], log_dir: Path,
              timeout_s: float) -> list[SizeResult]:
    """One all_reduce_perf process per size; every stdout kept in log_dir; a failure becomes a failed row."""
    log_dir.mkdir(parents=True, exist_ok=True)
    mode = "graph" if run.graph else "eager"
    out = []
    for size in run.sizes:
        cmd = command(binary, size, run)
        log = log_dir / f"nccl-tests-{run.profile or 'none'}-{mode}-{size}.txt"
        base = SizeResult(size_B=size, command=" ".join(cmd), log=str(log), status="failed")
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            out.append(base.model_copy(update={"reason": f"{BINARY} did not finish within {timeout_s:.0f} s"}))
            continue
        log.write_text(done.stdout + ("\n# stderr\n" + done.stderr if done.stderr else ""))
        parsed = parse(done.stdout)
        row = next((r for r in parsed.rows if r.size_B == size), None)
        if done.returncode != 0 or row is None:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            reason = f"{BINARY} exit {done.returncode}, no result row ({last[0][:200]})"
            out.append(base.model_copy(update={"reason": reason}))
            continue
        out.append(base.model_copy(update={"status": "ok", "row": row, "nccl_tests_version": parsed.nccl_tests_version,
                                           "nccl_library": parsed.nccl_library}))
    return out


def as_rows(results: list[SizeResult], run: RunSettings) -> list[ResultRow]:
    """nccl-tests' in-place results as rows of the kit's table (backend `nccl-tests`)."""
    calls = run.graph_calls * run.graph_launches if run.graph else run.iters
    base = ResultRow(backend="nccl-tests", profile=run.profile, nranks=run.nranks, graph=run.graph, type=run.dtype,
                     status="failed")
    rows = []
    for r in results:
        if r.row is None:
            rows.append(base.model_copy(update={"size_B": r.size_B, "reason": r.reason, "log": r.log}))
            continue
        ip = r.row.in_place
        rows.append(base.model_copy(update={
            "status": "ok", "size_B": r.size_B, "count": r.row.count, "time_us": ip.time_us,
            "time_us_p50": None, "time_us_p99": None, "algbw_GBps": ip.algbw_GBps, "busbw_GBps": ip.busbw_GBps,
            "wrong": ip.wrong if ip.wrong is not None else 0,
            "out_of_place_time_us": r.row.out_of_place.time_us, "samples": calls,
            "method": f"nccl-tests {r.nccl_tests_version} all_reduce_perf, in-place, -a 1: {r.command}",
            "nccl": r.nccl_library, "log": r.log,
        }))
    return rows


def compare(kit_rows: list[ResultRow], nt_rows: list[ResultRow]) -> list[ResultRow]:
    """The kit's rows, with nccl-tests' time and the ratio on each measured kit NCCL row (`nccl`, `nccl-direct`)
    of the same size."""
    by_size = {r.size_B: r for r in nt_rows if r.status == "ok"}
    return [_beside(row, by_size.get(row.size_B)) for row in kit_rows]


def _beside(row: ResultRow, other: ResultRow | None) -> ResultRow:
    if row.backend not in NCCL_BACKENDS or row.status != "ok" or other is None or other.time_us is None:
        return row
    assert row.time_us is not None  # a measured row is timed
    ratio = round(row.time_us / other.time_us, 3) if other.time_us > 0 else None
    return row.model_copy(update={"nccl_tests_time_us": other.time_us, "kit_over_nccl_tests": ratio})
