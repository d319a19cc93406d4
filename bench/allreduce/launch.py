"""Start one process per rank, watch their progress, and never hang: a stalled run is stopped and named.

Each rank runs `python -m bench.allreduce.worker` in its own session, with its output in
`DIR/logs/<backend>-rank<R>.log`. Ranks rendezvous through a file store in a fresh work directory.

A rank starts the way one of the server's TP workers does (`worker_environ`): this process plays
SGLang's launcher, so the rank inherits the environment SGLang's parent would hand its workers
(the profile applied there by sitecustomize, then SGLang's own variables, engine.py
`_set_envs_and_config`), and the kit's sitecustomize on PYTHONPATH re-applies the rendered profile
env file named by KIT_PROFILE_ENV in the rank before anything else runs. So a variable the profile
sets wins in every rank; one it leaves alone keeps SGLang's value.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bench.allreduce.harness import RunSpec, read_progress
from bench.allreduce.records import BackendRun, RankResult, RunSettings
from bench.allreduce.worker import EXIT_UNAVAILABLE

POLL_S = 0.1
GRACE_S = 5.0  # how long the other ranks get to exit on their own after one rank failed


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def sglang_parent_env(environ: Mapping[str, str], flags: Sequence[str]) -> dict[str, str]:
    """What SGLang 0.5.23's launcher writes into its own environment before it spawns its TP workers.

    engine.py `_set_envs_and_config` (docs/evidence.md "Parent-set variables"; the names are
    launcher/profiles/rules/parent_env.py PARENT_SET_ENV), given the environment it starts with
    (sitecustomize has applied the profile there) and the server's flags.
    """
    symm_mem = "--enable-symm-mem" in flags
    nvls = "--enable-nccl-nvls" in flags or symm_mem
    out = {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    if symm_mem or "NCCL_CUMEM_ENABLE" not in environ:
        out["NCCL_CUMEM_ENABLE"] = "1" if symm_mem else "0"
    if nvls or "NCCL_NVLS_ENABLE" not in environ:
        out["NCCL_NVLS_ENABLE"] = "1" if nvls else "0"
    if (symm_mem or "NCCL_GRAPH_MIXING_SUPPORT" not in environ) and _flag_int(flags, "--dcp-size", 1) > 1:
        out["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
    if environ.get("TRTLLM_ENABLE_PDL", "1") != "0":
        out["TRTLLM_ENABLE_PDL"] = "1"
    return out


def _flag_int(flags: Sequence[str], name: str, default: int) -> int:
    for i, flag in enumerate(flags):
        value = flags[i + 1] if flag == name and i + 1 < len(flags) else flag.partition("=")[2]
        if flag == name or flag.startswith(name + "="):
            try:
                return int(value)
            except ValueError:
                return default
    return default


def read_env_file(path: Path) -> dict[str, str]:
    """A rendered profile.env (NUL-separated NAME=value entries), as sitecustomize reads it."""
    entries = [e.partition("=") for e in path.read_text(encoding="utf-8").split("\0") if e]
    return {key: value for key, _, value in entries}


def worker_environ(
    base: Mapping[str, str], profile_env_file: Path | None = None, flags: Sequence[str] = ()
) -> dict[str, str]:
    """The environment a rank process is started with: what a TP worker inherits from SGLang's launcher.

    The server program runs with sitecustomize on PYTHONPATH and KIT_PROFILE_ENV naming the rendered
    profile.env (launcher/runtime/process/supervisor_conf.py); sitecustomize applies that file in SGLang's
    launcher, which then sets its own variables (`sglang_parent_env`) and spawns the workers, where
    sitecustomize applies the file again. Without a profile no KIT_PROFILE_ENV is passed on, and
    the ranks get SGLang's variables over `base` alone.
    """
    from launcher import settings
    from launcher.resources import sitecustomize_dir

    env = dict(base)
    env.pop(settings.KIT_PROFILE_ENV.name, None)
    if profile_env_file is not None:
        env.update(read_env_file(profile_env_file))  # sitecustomize in SGLang's launcher
        env[settings.KIT_PROFILE_ENV.name] = str(profile_env_file)
    env.update(sglang_parent_env(env, flags))
    paths = [str(sitecustomize_dir()), _repo_root(), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _child_env() -> dict[str, str]:
    return worker_environ(os.environ)


def stop_ranks(procs: list[subprocess.Popen[bytes]]) -> None:
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


def _rank_result(workdir: Path, rank: int) -> RankResult:
    """The `rank<R>.json` a worker wrote, parsed."""
    return RankResult.model_validate_json((workdir / f"rank{rank}.json").read_text())


def run_backend(
    backend: str,
    settings: RunSettings,
    log_dir: Path,
    on_progress: ProgressCallback | None = None,
    env: Mapping[str, str] | None = None,
) -> BackendRun:
    """Run one backend on `nranks` local processes and collect each rank's JSON result.

    `env`: the ranks' environment (`worker_environ`); by default this process's, without a profile.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kit-allreduce-") as tmp:
        workdir = Path(tmp)
        spec = RunSpec.for_backend(backend, settings, workdir)
        spec_path = workdir / "spec.json"
        spec.save(spec_path)
        logs = [log_dir / f"{spec.backend}-rank{r}.log" for r in range(spec.nranks)]
        procs: list[subprocess.Popen[bytes]] = []
        child_env = dict(env) if env is not None else _child_env()
        try:
            for rank in range(spec.nranks):
                with open(logs[rank], "wb") as fh:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "bench.allreduce.worker", str(spec_path), str(rank)],
                            stdout=fh,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            env=child_env,
                            start_new_session=True,
                        )
                    )
            outcome = _watch(procs, spec, workdir, logs, on_progress)
        finally:
            stop_ranks(procs)
        if outcome is not None:
            return outcome
        return BackendRun(status="ok", ranks=[_rank_result(workdir, r) for r in range(spec.nranks)])


def _watch(
    procs: list[subprocess.Popen[bytes]],
    spec: RunSpec,
    workdir: Path,
    logs: list[Path],
    on_progress: ProgressCallback | None,
) -> BackendRun | None:
    """Wait for every rank; None when all finished cleanly, else the failure or skip to report."""
    last_seen = [read_progress(workdir, r) for r in range(spec.nranks)]
    last_change = time.monotonic()
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return None
        unavailable = [r for r, c in enumerate(codes) if c == EXIT_UNAVAILABLE]
        if unavailable:
            result = _rank_result(workdir, unavailable[0])
            return BackendRun(status="unavailable", reason=result.reason or "unavailable")
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
