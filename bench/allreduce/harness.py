"""The per-rank measurement loop shared by every backend.

For each message size a rank shapes the buffer as (tokens, hidden) when it divides evenly and asks the
backend whether it takes that message. Then, in two passes over the sizes: first the exact check
(exact.py: several calls, and CUDA-graph replays, of small integers whose sums are exact, compared
element by element), then, unless `exact_only`, the warm-up and the timing.

Two timings per size (recorded in each row's `method`):
- The headline, nccl-tests' definition: after a barrier, a wall clock around a pipelined loop that is
  only synchronised at its end, divided by the calls in it. Eager: `iters` back-to-back calls. CUDA
  graph (`--graph`, like nccl-tests -G): `graph_calls` calls captured in one graph (nccl-tests -n),
  replayed `graph_launches` times back to back (nccl-tests -G). The parent averages it over ranks
  (nccl-tests -a 1, its default).
- Per call, for the spread: CUDA events around every call (eager) or every replay / graph_calls
  (graph); CPU (gloo): `time.perf_counter_ns` around every call. The parent takes, for each
  iteration, the slowest rank's sample (a collective is done when its last rank is), then p50/p99.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.allreduce import exact
from bench.allreduce.backends import Backend, BackendUnavailable, RankContext
from bench.allreduce.records import RankResult, RankRow, RunSettings
from bench.allreduce.sizes import DTYPES
from launcher import settings

TEST_HANG = settings.KIT_ALLREDUCE_TEST_HANG_RANK
"""Test hook: the rank with this index stops making progress right after init (exercises --timeout-s)."""


@dataclass
class RunSpec:
    """Everything a rank needs; written as JSON by the parent and read by each worker."""

    backend: str
    nranks: int
    sizes: list[int]
    dtype: str
    hidden: int
    iters: int
    warmup: int
    graph: bool
    graph_calls: int
    graph_launches: int
    init_method: str
    timeout_s: float
    workdir: str
    profile: str | None
    profile_env: dict[str, str]
    exact_only: bool = False  # the exact check alone: no warm-up, no timing

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> RunSpec:
        return cls(**json.loads(path.read_text()))

    @classmethod
    def for_backend(cls, backend: str, settings: RunSettings, workdir: Path) -> RunSpec:
        """One backend's spec: the command's settings, a file-store rendezvous in `workdir`."""
        return cls(backend=backend, init_method=f"file://{workdir / 'store'}", workdir=str(workdir),
                   **settings.model_dump())


class Progress:
    """A one-line file per rank that the parent watches to tell a slow rank from a hung one."""

    def __init__(self, workdir: Path, rank: int) -> None:
        self.path = workdir / f"rank{rank}.progress"
        self.step = 0

    def __call__(self, what: str) -> None:
        self.step += 1
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{self.step}\t{what}\n")
        os.replace(tmp, self.path)


def read_progress(workdir: Path, rank: int) -> tuple[int, str]:
    try:
        step, what = (workdir / f"rank{rank}.progress").read_text().rstrip("\n").split("\t", 1)
        return int(step), what
    except (FileNotFoundError, ValueError):
        return 0, "not started (importing torch)"


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _time_eager_cuda(backend: Backend, buf: Any, iters: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        backend.allreduce(buf)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends, strict=True)]


def _time_eager_cpu(backend: Backend, buf: Any, iters: int) -> list[float]:
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        backend.allreduce(buf)
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
    return samples


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _pipelined_us(backend: Backend, step: Any, repeats: int, calls: int, cuda: bool) -> tuple[float, float]:
    """nccl-tests' time: barrier, wall clock around `repeats` unsynchronised steps, / `calls` in them.

    Also the host's share: the time the loop took to enqueue them, / calls. When it is close to the
    whole time, the host launching the calls, not the collective, is what was measured.
    """
    _sync(cuda)
    backend.barrier()
    _sync(cuda)
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    launched = time.perf_counter()
    _sync(cuda)
    return (time.perf_counter() - t0) * 1e6 / calls, (launched - t0) * 1e6 / calls


def _measure_eager(backend: Backend, buf: Any, spec: RunSpec) -> tuple[list[float], tuple[float, float], str]:
    cuda = buf.is_cuda
    buf.zero_()  # sums of zeros stay zero: repeated in-place calls cannot overflow while timing
    for _ in range(spec.warmup):
        backend.allreduce(buf)
    _sync(cuda)
    mean = _pipelined_us(backend, lambda: backend.allreduce(buf), spec.iters, spec.iters, cuda)
    backend.barrier()
    how = f"time: wall clock over {spec.iters} pipelined calls / {spec.iters}; p50/p99: "
    if cuda:
        return _time_eager_cuda(backend, buf, spec.iters), mean, how + "cuda-events around every call"
    return _time_eager_cpu(backend, buf, spec.iters), mean, how + "perf_counter around every call"


def _measure_graph(backend: Backend, buf: Any, spec: RunSpec) -> tuple[list[float], tuple[float, float], str]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    buf.zero_()
    with torch.cuda.stream(side):  # eager calls first: lazy communicator set-up must not happen in capture
        for _ in range(max(spec.warmup, 1)):
            backend.allreduce(buf)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    timed = torch.cuda.CUDAGraph()
    with backend.capture(), torch.cuda.graph(timed):
        for _ in range(spec.graph_calls):
            backend.allreduce(buf)
    for _ in range(spec.warmup):
        timed.replay()
    calls = spec.graph_calls * spec.graph_launches
    mean = _pipelined_us(backend, timed.replay, spec.graph_launches, calls, True)
    backend.barrier()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(spec.iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(spec.iters)]
    for i in range(spec.iters):
        starts[i].record()
        timed.replay()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1000.0 / spec.graph_calls for s, e in zip(starts, ends, strict=True)]
    del timed
    return (
        samples,
        mean,
        f"time: wall clock over {spec.graph_launches} pipelined replays of a graph of {spec.graph_calls} calls "
        f"/ {calls}; p50/p99: cuda-events around every replay / {spec.graph_calls}",
    )


def _buffer(size: int, spec: RunSpec, device: Any) -> Any:
    """The message as the server sends it: (tokens, hidden) when the size divides, else one row."""
    import torch

    count = size // DTYPES[spec.dtype]
    shape = (count // spec.hidden, spec.hidden) if count % spec.hidden == 0 else (1, count)
    return torch.empty(shape, dtype=_torch_dtype(spec.dtype), device=device)


def check_size(backend: Backend, size: int, rank: int, spec: RunSpec, device: Any) -> RankRow:
    """One size's exact check on this rank (its `exact` and `wrong`), or the backend's reason to decline it."""
    buf = _buffer(size, spec, device)
    reason = backend.supports(buf)
    if reason:
        return RankRow(size_B=size, count=buf.numel(), skipped=reason)
    backend.barrier()
    check = exact.check_size(backend, buf, rank, spec.nranks, spec.dtype, spec.graph)
    return RankRow(size_B=size, count=buf.numel(), exact=check, wrong=check.wrong)


def measure_size(backend: Backend, row: RankRow, spec: RunSpec, device: Any) -> RankRow:
    """Time one size this rank has checked: sets `mean_us`, `launch_us`, `samples_us`, `method` on its row."""
    buf = _buffer(row.size_B, spec, device)
    backend.barrier()
    if spec.graph and buf.is_cuda:
        samples, (mean, launch), method = _measure_graph(backend, buf, spec)
    else:
        samples, (mean, launch), method = _measure_eager(backend, buf, spec)
    row.mean_us, row.launch_us, row.samples_us, row.method = mean, launch, samples, method
    return row


def _versions(device: Any) -> dict[str, str]:
    import torch

    info = {"torch": torch.__version__}
    if device.type == "cuda":
        info["device"] = torch.cuda.get_device_name(device)
        with_nccl = getattr(torch.cuda, "nccl", None)
        try:
            version = with_nccl.version() if with_nccl is not None else None
            if isinstance(version, tuple):
                info["nccl"] = ".".join(str(v) for v in version)
        except Exception:
            pass
    else:
        info["device"] = "cpu"
    return info


def run_rank(spec: RunSpec, rank: int) -> RankResult:
    """Everything one rank does; returns the result the parent merges."""
    progress = Progress(Path(spec.workdir), rank)
    # The profile's env is not applied here: the rank was started as a TP worker is (launch.worker_environ),
    # and the kit's sitecustomize applied the rendered profile before this interpreter ran any code.
    missed = sorted(k for k, v in spec.profile_env.items() if os.environ.get(k) != v)
    if missed:
        raise RuntimeError(
            f"the profile's env did not reach this rank ({', '.join(missed)}): is the kit's sitecustomize on "
            f"PYTHONPATH ({os.environ.get('PYTHONPATH', '')}) and KIT_PROFILE_ENV "
            f"({settings.KIT_PROFILE_ENV.raw() or 'unset'}) its rendered profile.env?"
        )
    import torch

    from bench.allreduce.registry import make_backend

    backend = make_backend(spec.backend)
    progress("initialising backend")
    ctx = RankContext(
        rank=rank,
        world=spec.nranks,
        init_method=spec.init_method,
        timeout_s=spec.timeout_s,
        hidden=spec.hidden,
        max_bytes=max(spec.sizes),
        dtype=_torch_dtype(spec.dtype),
    )
    try:
        backend.init(ctx)
    except BackendUnavailable as exc:
        return RankResult(rank=rank, status="unavailable", reason=str(exc))
    device = torch.device("cuda", ctx.local_device) if backend.device_type == "cuda" else torch.device("cpu")
    progress("initialised")
    if TEST_HANG.get() == rank:
        while True:  # test hook: never report progress again
            time.sleep(3600)
    rows = []
    for size in spec.sizes:
        progress(f"exact check at {size} B")
        rows.append(check_size(backend, size, rank, spec, device))
    if not spec.exact_only:
        for row in rows:
            if row.skipped is None:
                progress(f"timing the all-reduce of {row.size_B} B")
                measure_size(backend, row, spec, device)
    progress("tearing down")
    backend.teardown()
    env_seen = {k: os.environ[k] for k in spec.profile_env if k in os.environ}
    return RankResult(rank=rank, status="ok", rows=rows, versions={**_versions(device), **backend.describe()},
                      env_applied=env_seen)
