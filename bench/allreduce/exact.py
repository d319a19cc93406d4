"""The exactness check every `bench allreduce` backend goes through: integer sums, element by element.

On each rank, for each size (as a (tokens, hidden) tensor where it divides, as the server sends it):
- `EXACT_CALLS` eager calls, each with other values: rank r, call g, element i holds
  (i + 5r + 7g) mod M, with M at most 16 and small enough that the sum over every rank (and so every
  partial sum, in any order) is an integer the dtype holds exactly (bf16: up to 256). The result is
  compared with the exact sum, computed in int64, at every element: one wrong element is a FAIL, no
  tolerance. Values move with the call, so a stale buffer, or a double buffer that did not turn over,
  returns another call's sums and fails.
- With `--graph` on a CUDA backend: one call captured in a CUDA graph, then `EXACT_CALLS` replays, each
  after new values are copied into the captured input tensor; every replay is checked the same way.
- Every check also keeps a digest of the result's bytes: the parent FAILs ranks that got different bits.
- Negative controls. The first eager call of each size runs under the profiler, and the kernels (or,
  on the CPU, the host ranges) it launched are matched against the backend's own (`Backend.path`,
  classified as `bench trace` classifies kernels): another backend's kernel in its place (NCCL where
  a one-shot kernel was asked for) FAILs as "path not taken". And the checker checks itself:
  `KIT_ALLREDUCE_TEST_CORRUPT_RANK=R` makes rank R overwrite one element of its result on the second
  call (and the second replay) of every size, and the verdict must then be FAIL naming it.

The parent turns the ranks' records into one verdict per backend (`verdict`): PASS, FAIL with the first
wrong element (backend, size, call, rank, element, value, expected), or `not run: why` (backend skipped
or failed, every size declined, a single rank). Never PASS for something that was not checked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from bench.allreduce.records import (
    BackendRun,
    CallCheck,
    Comparison,
    ExactCheck,
    FirstFail,
    FirstWrong,
    Verdict,
)
from launcher import settings

EXACT_CALLS = 3
"""Eager calls checked per size, and CUDA-graph replays after one capture: each with other values."""

RANK_STEP, CALL_STEP = 5, 7
"""Element i of rank r at call g holds (i + RANK_STEP*r + CALL_STEP*g) mod M."""

EXACT_UP_TO: dict[str, int] = {"bf16": 256, "fp16": 2048, "fp32": 1 << 24}
"""Every integer from 0 to this is exact in the dtype (8, 11 and 24 significant bits)."""

CORRUPT = settings.KIT_ALLREDUCE_TEST_CORRUPT_RANK
"""Test hook: this rank overwrites one element of its result on the second call and replay of every size."""
CORRUPTED_CALL = 1  # 0-based: the second eager call and the second replay
CORRUPT_VALUE = -1  # never a sum of values >= 0

NOT_RUN, PASS, FAIL = "not run", "PASS", "FAIL"


def modulus(dtype: str, world: int) -> int:
    """M: values run 0..M-1, at most 15, with (M-1) x world still exact in `dtype`."""
    return max(2, min(16, EXACT_UP_TO[dtype] // max(world, 1) + 1))


def value(index: int, rank: int, call: int, mod: int) -> int:
    return (index + RANK_STEP * rank + CALL_STEP * call) % mod


def exact_sum(index: int, call: int, world: int, mod: int) -> int:
    """The correct result at one element (the parent's copy of what every rank compares with)."""
    return sum(value(index, r, call, mod) for r in range(world))


# ----- on each rank ------------------------------------------------------------------------------------


def _values(count: int, rank: int, call: int, mod: int, device: Any) -> Any:
    import torch

    idx = torch.arange(count, dtype=torch.int64, device=device)
    return (idx + RANK_STEP * rank + CALL_STEP * call) % mod


def _expected(count: int, call: int, world: int, mod: int, device: Any) -> Any:
    total = _values(count, 0, call, mod, device)
    for r in range(1, world):
        total = total + _values(count, r, call, mod, device)
    return total


def digest(flat: Any) -> str:
    """The result's bytes, hashed: equal digests on every rank mean bit-identical results."""
    import torch

    raw = flat.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def compare(result: Any, expected: Any, corrupt: bool = False) -> Comparison:
    """One result against the exact sum: wrong elements, its digest, and the first wrong element if any.

    `corrupt` (the test hook) overwrites one element of the result itself first, as a broken kernel would."""
    import torch

    flat = result.detach().reshape(-1)
    if corrupt:
        flat[flat.numel() // 2] = CORRUPT_VALUE
    got = flat.to(torch.float64)
    bad = got != expected.to(torch.float64)
    wrong = int(bad.sum().item())
    first = None
    if wrong:
        i = int(bad.nonzero()[0].item())
        first = FirstWrong(index=i, got=f"{float(got[i].item()):g}", expected=int(expected[i].item()))
    return Comparison(wrong=wrong, digest=digest(flat), first=first)


def _kernel_names(prof: Any) -> list[str]:
    """Names of the device kernels a torch.profiler session recorded (CPU ops and ranges left out)."""
    from torch.autograd import DeviceType

    names: list[str] = []
    for event in prof.events():
        if getattr(event, "device_type", None) == DeviceType.CUDA:
            names.append(event.name)
        names.extend(k.name for k in getattr(event, "kernels", None) or ())
    return list(dict.fromkeys(names))


def traced_call(backend: Any, buf: Any) -> tuple[Any, list[str] | None, str]:
    """One all-reduce under the profiler: (result, what it launched or None, how it was looked at).

    CUDA: the device kernels (Kineto/CUPTI). CPU: the host ranges (the autograd profiler, without Kineto,
    which costs milliseconds: torch.distributed records `gloo:all_reduce` there)."""
    import torch

    if backend.device_type == "cuda":
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = backend.allreduce(buf)
                torch.cuda.synchronize()
            return out, _kernel_names(prof), "kernels seen by the profiler"
        except Exception as exc:  # no CUPTI here: the sums are still checked, the path is unknown
            torch.cuda.synchronize()
            return backend.allreduce(buf), None, f"profiler failed ({type(exc).__name__}: {exc})"
    try:
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            out = backend.allreduce(buf)
        return out, list(dict.fromkeys(e.name for e in prof.function_events)), "host ranges seen by the profiler"
    except Exception as exc:
        return backend.allreduce(buf), None, f"profiler failed ({type(exc).__name__}: {exc})"


def path_state(expect: tuple[str, str] | None, names: list[str] | None, how: str = "") -> tuple[str, str]:
    """Whether the backend's own path ran: ("taken" | "not taken" | "unverified" | "unknown" | "n/a", evidence).

    `expect`: ("device", kernel family as bench/trace/classify.py names it) or ("host", range prefix).
    Only a positive sign of another path FAILs ("not taken"): NCCL's kernel where a one-shot kernel was
    asked for, or no NCCL kernel at all where NCCL was; a profile that shows nothing decides nothing."""
    if expect is None:
        return "n/a", "the adapter names no kernel to look for"
    if names is None:
        return "unknown", how or "the profiler did not run"
    where, family = expect
    if where == "host":
        hit = next((n for n in names if n.startswith(family)), None)
        if hit:
            return "taken", hit
        return "unverified", f"no '{family}' range among {len(names)} host event(s)"
    from bench.trace.classify import classify_kernel

    families = {n: classify_kernel(n).family for n in names}
    hit = next((n for n, f in families.items() if f == family), None)
    if hit:
        return "taken", hit
    if not names:
        return "unknown", "the profiler recorded no kernel"
    shown = ", ".join(n[:80] for n in names[:3])
    if family == "nccl":
        return "not taken", f"no NCCL kernel ran; the call launched: {shown}"
    nccl = next((n for n, f in families.items() if f == "nccl"), None)
    if nccl:
        return "not taken", f"NCCL ran in its place: {nccl[:80]}"
    return "unverified", f"no kernel named as {family}'s; the call launched: {shown}"


def check_size(backend: Any, buf: Any, rank: int, world: int, dtype: str, graph: bool) -> ExactCheck:
    """The exact check of one size on this rank (the caller has checked that the backend takes `buf`)."""
    import torch

    cuda = buf.is_cuda
    count, shape = buf.numel(), tuple(buf.shape)
    mod = modulus(dtype, world)
    corrupt_here = CORRUPT.get() == rank

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    calls: list[CallCheck] = []
    names: list[str] | None = None
    how = ""
    for n in range(EXACT_CALLS):
        buf.copy_(_values(count, rank, n, mod, buf.device).to(buf.dtype).view(shape))
        if n == 0:
            out, names, how = traced_call(backend, buf)
        else:
            out = backend.allreduce(buf)
        sync()
        expected = _expected(count, n, world, mod, buf.device)
        check = compare(out, expected, corrupt_here and n == CORRUPTED_CALL)
        calls.append(CallCheck(mode="eager", n=n + 1, call=n, **check.model_dump()))
    if graph and cuda:
        captured = torch.cuda.CUDAGraph()
        with backend.capture(), torch.cuda.graph(captured):
            out = backend.allreduce(buf)
        for k in range(EXACT_CALLS):
            call = EXACT_CALLS + k
            buf.copy_(_values(count, rank, call, mod, buf.device).to(buf.dtype).view(shape))
            captured.replay()
            sync()
            expected = _expected(count, call, world, mod, buf.device)
            check = compare(out, expected, corrupt_here and k == CORRUPTED_CALL)
            calls.append(CallCheck(mode="graph", n=k + 1, call=call, **check.model_dump()))
        del captured
    state, evidence = path_state(getattr(backend, "path", None), names, how)
    return ExactCheck(shape=list(shape), modulus=mod, calls=calls, wrong=sum(c.wrong for c in calls), path=state,
                      path_evidence=evidence)


# ----- in the parent: one verdict per backend ------------------------------------------------------------


def _call_name(call: CallCheck) -> str:
    return f"{'eager call' if call.mode == 'eager' else 'graph replay'} {call.n}/{EXACT_CALLS}"


def _where(index: int, shape: list[int]) -> str:
    if len(shape) == 2 and shape[0] > 1:
        return f"element {index} (token {index // shape[1]}, column {index % shape[1]})"
    return f"element {index}"


def _size_text(size: int, shape: list[int], hidden: int) -> str:
    if len(shape) == 2 and shape[1] == hidden:
        return f"{size} B ({shape[0]} x {hidden})"
    return f"{size} B"


def _stale_hint(first: FirstWrong, call: CallCheck, calls: list[CallCheck], world: int, mod: int) -> str:
    """When the wrong value is another call's sum at that element: the buffer did not turn over."""
    try:
        got = float(first.got)
    except ValueError:
        return ""
    for other in calls:
        if other.call != call.call and exact_sum(first.index, other.call, world, mod) == got:
            return f" (that is {_call_name(other)}'s sum there: a stale buffer?)"
    return ""


@dataclass
class _Tally:
    """What the checks of one backend add up to, size by size."""

    backend: str
    nranks: int
    hidden: int
    checked: list[int] = field(default_factory=list)
    declined: list[tuple[int, str]] = field(default_factory=list)
    graph_replays: int = 0
    first_fail: FirstFail | None = None
    fails: int = 0
    total_wrong: int = 0
    checks: int = 0
    paths: list[tuple[int, str, str]] = field(default_factory=list)

    def add_size(self, size: int, exact: list[ExactCheck]) -> None:
        """Every call of one size, on every rank: wrong elements, ranks with other bits, the kernel path."""
        self.checked.append(size)
        first = exact[0]
        self.graph_replays = max(self.graph_replays, sum(c.mode == "graph" for c in first.calls))
        for j, call in enumerate(first.calls):
            self.checks += 1
            bad = [(r, e.calls[j]) for r, e in enumerate(exact) if e.calls[j].wrong]
            self.total_wrong += sum(c.wrong for _, c in bad)
            digests = {e.calls[j].digest for e in exact}
            if bad or len(digests) > 1:
                self.fails += 1
            if self.first_fail is None:
                self.first_fail = self._first_fail(size, exact, j, call, bad)
        for r, e in enumerate(exact):
            self.paths.append((size, e.path, f"rank {r}: {e.path_evidence}"))

    def _first_fail(self, size: int, exact: list[ExactCheck], j: int, call: CallCheck,
                    bad: list[tuple[int, CallCheck]]) -> FirstFail | None:
        """The failure of call `j` at this size (a wrong element first, then ranks with other bits), or None."""
        shape, mod = exact[0].shape, exact[0].modulus
        where = f"{self.backend} at {_size_text(size, shape, self.hidden)}, {_call_name(call)}"
        if bad:
            rank, c = bad[0]
            f = c.first
            assert f is not None  # a call with wrong elements names the first
            return FirstFail(
                backend=self.backend, size_B=size, shape=shape, mode=c.mode, call=c.n, rank=rank, index=f.index,
                got=f.got, expected=f.expected,
                text=f"{where}, rank {rank}: {_where(f.index, shape)} = {f.got}, expected {f.expected} (the exact "
                     f"sum over {self.nranks} ranks)" + _stale_hint(f, c, exact[rank].calls, self.nranks, mod),
            )
        groups: dict[str, list[int]] = {}
        for r, e in enumerate(exact):
            groups.setdefault(e.calls[j].digest, []).append(r)
        if len(groups) < 2:
            return None
        split = "; ".join(f"ranks {', '.join(map(str, rs))}" for rs in groups.values())
        return FirstFail(backend=self.backend, size_B=size, shape=shape, mode=call.mode, call=call.n,
                         text=f"{where}: the ranks got different bits ({split})")

    def verdict(self) -> Verdict:
        """PASS, FAIL (a wrong element, other bits, another kernel path) or `not run` (every size declined)."""
        scope = {"sizes_checked": self.checked, "sizes_declined": [s for s, _ in self.declined],
                 "calls": EXACT_CALLS, "graph_replays": self.graph_replays}
        if not self.checked:
            why = self.declined[0][1] if self.declined else "no size was given"
            return Verdict(verdict=NOT_RUN, text=f"not run: the backend declined every size ({why})", **scope)
        not_taken = next(((s, ev) for s, st, ev in self.paths if st == "not taken"), None)
        path = _path_summary(self.paths)
        done = f"{len(self.checked)} size(s) x {EXACT_CALLS} calls" + (
            f" + {self.graph_replays} graph replays" if self.graph_replays else "")
        if self.first_fail is not None:
            text = (f"FAIL: {self.first_fail.text}; {self.total_wrong} wrong element(s), {self.fails} of "
                    f"{self.checks} checks failed on some rank ({done})")
            return Verdict(verdict=FAIL, text=text, first_wrong=self.first_fail, path=path, **scope)
        if not_taken is not None:
            text = f"FAIL: {self.backend} at {not_taken[0]} B: its own kernel path was not taken ({not_taken[1]})"
            return Verdict(verdict=FAIL, text=text, path=path, **scope)
        note = (f"; declined (SGLang sends them to NCCL): {', '.join(str(s) for s, _ in self.declined)} B"
                if self.declined else "")
        text = f"PASS: every element exact and bit-identical on {self.nranks} ranks, {done}; path: {path}{note}"
        return Verdict(verdict=PASS, text=text, path=path, **scope)


def verdict(backend: str, outcome: BackendRun, nranks: int, hidden: int, sizes: list[int]) -> Verdict:
    """One backend's verdict from its ranks' results; see the module docstring."""
    if outcome.status == "unavailable":
        return _not_run(f"backend skipped: {outcome.reason}")
    if outcome.status != "ok":
        return _not_run(f"the backend failed before its check finished: {outcome.reason}")
    if nranks < 2:
        return _not_run(f"{nranks} rank: an all-reduce over one rank adds nothing (NCCL launches no kernel at "
                        "world size 1); run with --nranks 2 or more")
    tally = _Tally(backend, nranks, hidden)
    for i, size in enumerate(sizes):
        per_rank = [r.rows[i] for r in outcome.ranks]
        skipped = next((r.skipped for r in per_rank if r.skipped), None)
        if skipped:
            tally.declined.append((size, skipped))
            continue
        exact = [r.exact for r in per_rank if r.exact is not None]
        if len(exact) < len(per_rank):
            return _not_run(f"no exact check was recorded at {size} B (ranks of another kit version?)")
        tally.add_size(size, exact)
    return tally.verdict()


def _path_summary(paths: list[tuple[int, str, str]]) -> str:
    states = [st for _, st, _ in paths]
    if states and all(st == "taken" for st in states):
        name = paths[0][2].split(": ", 1)[1]
        return f"{name} at every size"
    for wanted in ("not taken", "unverified", "unknown", "n/a"):
        hit = next(((s, ev) for s, st, ev in paths if st == wanted), None)
        if hit:
            return f"{wanted} at {hit[0]} B ({hit[1]})"
    return "none checked"


def _not_run(why: str) -> Verdict:
    return Verdict(verdict=NOT_RUN, text=f"not run: {why}")
