"""Before SGLang starts: check exactly the all-reduce the plan's profile switches SGLang to.

A profile that changes SGLang's reduction (FlashInfer fusion, PCIe-IPC, MSCCL++, torch symm-mem, or NCCL
under a tuned environment) is a claim that the sums stay correct. server_exec runs `bench allreduce
--exact-only` (bench/allreduce/exact.py: integer inputs whose sums are exact, every element compared,
several calls and CUDA-graph replays with new values, ranks compared bit for bit) for those backends on
the GPUs the server will use, in the plan's own environment (`--plan` profile.json), at the decode and
verify sizes for the model's hidden size, before SGLang is started. A FAIL stops the start (exit 1), so a
switch rolls back as after any failed start; anything that could not be checked (no GPU, a backend its
library does not offer here, a check that broke) is said in one line and the start goes on: the server's
own activation check (activation.py) still judges what runs. KIT_ALLREDUCE_START_CHECK=0 turns it off.

`reductions` and `decide` are pure (tests drive them with plans and a fake GPU count); `run_check` runs
the bench through a runner (server_exec's supervision: signals passed on, leftovers ended).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from launcher import atomic, settings
from launcher.runtime.activation import flag_int, flag_map, graphs_on
from launcher.state_layout import STATE_LAYOUT

CHECK_DIR = STATE_LAYOUT["allreduce_check"]
"""Under the state dir: the last start check's allreduce.json/.csv, rank logs and check.log."""
VERDICTS_CAP = 4 << 20  # allreduce.json: one row per backend and size
NO_PROGRESS_S = 300.0  # bench's hang detector: FlashInfer compiles its comm kernels on first use (about 200 s)
DEFAULT_HIDDEN = 7168  # DeepSeek-V3 / Kimi-K2, when the model's config.json cannot be read
DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/dxg")
GPU_PROBE = "import torch; print(torch.cuda.device_count() if torch.version.cuda else 0)"
_TRUE = ("1", "true", "yes", "on")
_NCCL_LOGGING = ("NCCL_DEBUG", "NCCL_WARN")  # prefixes of NCCL variables that change what it logs, not what it sums
_DTYPES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}


@dataclass(frozen=True)
class Decision:
    """What to do before this start: `run` the check of `backends` on `nranks` GPUs, or say `why` not."""

    run: bool
    why: str
    backends: tuple[str, ...] = ()
    nranks: int = 0
    graph: bool = False
    dtype: str = "bf16"


@dataclass
class Outcome:
    """`stop`: the exit status that ends this start (None: start the server); `lines` for the server log."""

    stop: int | None = None
    lines: list[str] = field(default_factory=list)


def reductions(plan: Any) -> list[tuple[str, str]]:
    """(bench backend, what in the plan puts it in SGLang's all-reduce) for each one the profile changes."""
    flags, env = flag_map(plan.flags), plan.env
    out: list[tuple[str, str]] = []
    fusion = flags.get("flashinfer-allreduce-fusion-backend")
    if fusion and flags.get("enforce-disable-flashinfer-allreduce-fusion") is not True:
        out.append(("fused-ar", f"--flashinfer-allreduce-fusion-backend {fusion}"))
    if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).lower() in _TRUE:
        out.append(("pcie-ipc", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"))
    if flags.get("enable-mscclpp") is True:
        out.append(("mscclpp", "--enable-mscclpp"))
    if flags.get("enable-torch-symm-mem") is True:
        out.append(("symm-mem", "--enable-torch-symm-mem"))
    nccl = sorted(k for k in env if k.startswith("NCCL_") and not k.startswith(_NCCL_LOGGING))
    if nccl:  # every reduction the others decline (prefill, large messages) runs on this NCCL
        out.append(("nccl", ", ".join(f"{k}={env[k]}" for k in nccl)))
    return out


def decide(plan: Any, *, enabled: bool, count_gpus: Callable[[], tuple[int, str]]) -> Decision | None:
    """None when the profile leaves SGLang's reduction as it is (nothing to check, nothing to say)."""
    found = reductions(plan)
    if not found:
        return None
    flags = flag_map(plan.flags)
    what = f"profile {plan.name} puts " + "; ".join(f"{b} ({why})" for b, why in found) + " in SGLang's all-reduce"
    if not enabled:
        return Decision(False, f"not run: {settings.KIT_ALLREDUCE_START_CHECK.name}=0 turns it off; {what}")
    tp = flag_int(flags.get("tp-size", 1), 1)
    if tp < 2:
        return Decision(False, f"not run: --tp-size {tp}: the server runs no tensor-parallel all-reduce; {what}")
    gpus, how = count_gpus()
    if gpus < 2:
        return Decision(False, f"not run: no GPUs to reduce across ({how}); {what}")
    if gpus < tp:
        return Decision(False, f"not run: {gpus} GPUs visible ({how}), fewer than the plan's --tp-size {tp}; {what}")
    dtype = _DTYPES.get(str(flags.get("dtype", "auto")), "bf16")
    graph = graphs_on(flags)
    backends = tuple(b for b, _ in found)
    return Decision(True, f"checking {', '.join(backends)} exactly on {tp} GPUs before SGLang starts ({what})",
                    backends, tp, graph, dtype)


def visible_gpus(nodes: tuple[str, ...] = DEVICE_NODES, timeout_s: float = 120.0) -> tuple[int, str]:
    """(GPUs torch sees in this environment, how that was found). No device node: 0, without importing torch;
    else torch.cuda.device_count() in a child process (this one stays the server's small parent)."""
    if not any(glob.glob(pattern) for pattern in nodes):
        return 0, f"no GPU device node here ({', '.join(nodes)})"
    try:
        out = subprocess.run([sys.executable, "-c", GPU_PROBE], capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"counting GPUs with torch failed ({type(exc).__name__}: {exc})"
    words = out.stdout.split()
    if out.returncode != 0 or not words or not words[-1].isdigit():
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return 0, f"torch could not count GPUs (exit {out.returncode}: {tail})"
    return int(words[-1]), f"torch.cuda.device_count() = {words[-1]}"


def model_hidden(plan: Any) -> tuple[int, str]:
    """The target model's hidden size from its config.json (the all-reduce message is tokens x hidden)."""
    path = plan.local().get("model-path")
    try:
        config = json.loads((Path(str(path)) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return DEFAULT_HIDDEN, f"hidden {DEFAULT_HIDDEN}: {path}/config.json cannot be read"
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    hidden = config.get("hidden_size") or text.get("hidden_size")
    if isinstance(hidden, int) and hidden > 0:
        return hidden, f"hidden {hidden} from {path}/config.json"
    return DEFAULT_HIDDEN, f"hidden {DEFAULT_HIDDEN}: no hidden_size in {path}/config.json"


def command(decision: Decision, plan_json: Path, out_dir: Path, hidden: int) -> list[str]:
    """`bench allreduce --exact-only` for the decision: the decode and verify sizes (tokens x hidden)."""
    cmd = [sys.executable, "-m", "bench", "allreduce", "--exact-only", "--plan", str(plan_json),
           "--backends", ",".join(decision.backends), "--nranks", str(decision.nranks), "--hidden", str(hidden),
           "--dtype", decision.dtype, "--timeout-s", f"{NO_PROGRESS_S:g}", "--out", str(out_dir)]
    return [*cmd, "--graph"] if decision.graph else cmd


def verdicts(out_dir: Path) -> dict[str, str]:
    """Each backend's exactness verdict text from the check's allreduce.json ({} when it wrote none)."""
    from launcher.runtime.records import (
        state as runtime_state,  # the one reader: a regular file of bounded size
    )

    try:
        rows = runtime_state.load(out_dir / "allreduce.json", None, VERDICTS_CAP)
    except runtime_state.Damaged:
        return {}
    out: dict[str, str] = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("exact"), str):
            out.setdefault(str(row.get("backend")), row["exact"])
    return out


def quiet(text: str) -> str:
    """`text` cut before the first of the lines the start's log follower reads as SGLang's own (start_lines
    NEEDLES): a library's words quoted here (a skipped backend's reason) must not pass for the server's."""
    from launcher.runtime.start_lines import ADAPTIVE_UPDATE, NEEDLES

    at = min((text.find(n) for n in (*NEEDLES, ADAPTIVE_UPDATE[0]) if n in text), default=-1)
    if at < 0:
        return text
    return text[:at].rstrip(" :;,(") + " ... (the rest, a library's own words, is in the check's allreduce.json)"


Runner = Callable[[list[str], IO[str]], int]


def run_check(decision: Decision, plan_json: Path, out_dir: Path, hidden: tuple[int, str], run: Runner,
              stopped: Callable[[], int | None] = lambda: None) -> Outcome:
    """Run the check and turn its verdicts into the start's outcome: FAIL stops it, the rest is reported.
    `stopped`: the exit status to end with when a stop was asked for while it ran (else None)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "allreduce.json").unlink(missing_ok=True)  # a verdict read below is this run's, never a stale one
    log = out_dir / "check.log"
    cmd = command(decision, plan_json, out_dir, hidden[0])
    lines = [f"all-reduce check: {quiet(decision.why)}; {hidden[1]}"]
    log.unlink(missing_ok=True)  # whatever was there, a link included (removed, never followed)
    with os.fdopen(atomic.open_regular(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as fh:
        rc = run(cmd, fh)
    stop = stopped()
    if stop is not None:  # a stop (or a switch) came during the check: never start after that
        return Outcome(stop, [*lines, f"all-reduce check stopped (the check exited {rc}); SGLang is not started"])
    found = verdicts(out_dir)
    if not found:
        tail = _last_line(log)
        return Outcome(None, [*lines, f"all-reduce check not run: `bench allreduce` exited {rc} without a verdict "
                                      f"({quiet(tail)}; {log}); starting SGLang unchecked"])
    failed = {b: t for b, t in found.items() if t.startswith("FAIL")}
    for backend, text in found.items():
        lines.append(f"all-reduce check {backend}: {quiet(text)}")
    if failed:
        backend, text = next(iter(failed.items()))
        lines.append(f"all-reduce check FAIL: {quiet(text.removeprefix('FAIL: '))}; SGLang is not started "
                     f"(exit 1): this profile's {backend} all-reduce failed its exact check on these GPUs; rank "
                     f"logs in {out_dir / 'logs'}; {settings.KIT_ALLREDUCE_START_CHECK.name}=0 skips the check")
        return Outcome(1, lines)
    return Outcome(None, lines)


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return (lines or ["no output"])[-1][:300]


def before_start(plan: Any, state_dir: Path, run: Runner, count_gpus: Callable[[], tuple[int, str]] = visible_gpus,
                 stopped: Callable[[], int | None] = lambda: None) -> Outcome:
    """server_exec's step before it starts SGLang: decide, and check when the decision says so."""
    from launcher.state_layout import StatePaths

    decision = decide(plan, enabled=bool(settings.KIT_ALLREDUCE_START_CHECK.get()), count_gpus=count_gpus)
    if decision is None:
        return Outcome()
    if not decision.run:
        return Outcome(None, [f"all-reduce check {quiet(decision.why)}"])
    paths = StatePaths(state_dir)
    return run_check(decision, paths.profile_json, paths.allreduce_check, model_hidden(plan), run, stopped)
