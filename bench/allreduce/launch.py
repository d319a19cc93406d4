"""Start one process per rank, watch their progress, and never hang: a stalled run is stopped and named.

Each rank runs `python -m bench.allreduce.worker` in its own session, with its output in
`DIR/logs/<backend>-rank<R>.log`. Ranks rendezvous through a file store in a fresh work directory.
If no rank reports progress for `timeout_s`, the ranks that got least far are named as hung and every
rank is stopped (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.allreduce.harness import RunSpec, read_progress
from bench.allreduce.worker import EXIT_UNAVAILABLE

POLL_S = 0.1
GRACE_S = 5.0  # how long the other ranks get to exit on their own after one rank failed


@dataclass
class BackendRun:
    """Outcome of one backend: per-rank results, or why there are none."""

    status: str  # "ok", "unavailable", "failed"
    reason: str = ""
    ranks: list[dict[str, Any]] = field(default_factory=list)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = _repo_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each rank's process group, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(p.poll() is None for p in alive):
            time.sleep(POLL_S)


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return ""
    useful = [ln for ln in lines if not ln.startswith("USDT:")]
    return (useful or lines or [""])[-1][:300]


def _hung_message(workdir: Path, nranks: int, done: set[int], timeout_s: float, logs: list[Path]) -> str:
    progress = {r: read_progress(workdir, r) for r in range(nranks) if r not in done}
    lowest = min(step for step, _ in progress.values())
    hung = sorted(r for r, (step, _) in progress.items() if step == lowest)
    waiting = sorted(set(progress) - set(hung))
    names = ", ".join(f"rank {r}" for r in hung)
    parts = [
        f"{names} hung: no progress for {timeout_s:g} s (last step: {progress[hung[0]][1]}); "
        f"all ranks were stopped"
    ]
    if waiting:
        parts.append("waiting: " + ", ".join(f"rank {r} at '{progress[r][1]}'" for r in waiting))
    parts.append(f"log: {logs[hung[0]]}")
    return "; ".join(parts)


ProgressCallback = Callable[[list[tuple[int, str]]], None]


def run_backend(
    spec_fields: dict[str, Any], log_dir: Path, on_progress: ProgressCallback | None = None
) -> BackendRun:
    """Run one backend on `nranks` local processes and collect each rank's JSON result."""
    import json

    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kit-allreduce-") as tmp:
        workdir = Path(tmp)
        spec = RunSpec(init_method=f"file://{workdir / 'store'}", workdir=str(workdir), **spec_fields)
        spec_path = workdir / "spec.json"
        spec.save(spec_path)
        logs = [log_dir / f"{spec.backend}-rank{r}.log" for r in range(spec.nranks)]
        procs: list[subprocess.Popen[bytes]] = []
        env = _child_env()
        try:
            for rank in range(spec.nranks):
                with open(logs[rank], "wb") as fh:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "bench.allreduce.worker", str(spec_path), str(rank)],
                            stdout=fh,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            env=env,
                            start_new_session=True,
                        )
                    )
            outcome = _watch(procs, spec, workdir, logs, on_progress)
        finally:
            _stop(procs)
        if outcome is not None:
            return outcome
        ranks = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(spec.nranks)]
        return BackendRun(status="ok", ranks=ranks)


def _watch(
    procs: list[subprocess.Popen[bytes]],
    spec: RunSpec,
    workdir: Path,
    logs: list[Path],
    on_progress: ProgressCallback | None,
) -> BackendRun | None:
    """Wait for every rank; None when all finished cleanly, else the failure or skip to report."""
    import json

    last_seen = [read_progress(workdir, r) for r in range(spec.nranks)]
    last_change = time.monotonic()
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return None
        unavailable = [r for r, c in enumerate(codes) if c == EXIT_UNAVAILABLE]
        if unavailable:
            result = json.loads((workdir / f"rank{unavailable[0]}.json").read_text())
            return BackendRun(status="unavailable", reason=result.get("reason", "unavailable"))
        bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            failed_at = failed_at or time.monotonic()
            if all(c is not None for c in codes) or time.monotonic() - failed_at > GRACE_S:
                detail = "; ".join(
                    f"rank {r} exited with code {codes[r]}: {_last_line(logs[r])}" for r in bad
                )
                return BackendRun(status="failed", reason=f"{detail} (logs in {logs[0].parent})")
        now_seen = [read_progress(workdir, r) for r in range(spec.nranks)]
        if now_seen != last_seen:
            last_seen, last_change = now_seen, time.monotonic()
            if on_progress is not None:
                on_progress(now_seen)
        elif time.monotonic() - last_change > spec.timeout_s:
            done = {r for r, c in enumerate(codes) if c == 0}
            return BackendRun(
                status="failed", reason=_hung_message(workdir, spec.nranks, done, spec.timeout_s, logs)
            )
        time.sleep(POLL_S)
