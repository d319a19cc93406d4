"""Does NCCL_GRAPH_MIXING_SUPPORT cost an SGLang-shaped decode graph, and is 0 safe there?

One process per GPU, started here (no torchrun), each pair under one setting of
NCCL_GRAPH_MIXING_SUPPORT (NCCL reads it at init), settings interleaved A B A B (`schedule`).

In each `main` pair, per verify row count (bench/allreduce/sizes.py VERIFY_TOKENS):
- a CUDA graph shaped like one decode step: per layer a GEMM (rows x K) @ (K x hidden), an all-reduce
  of the (rows, hidden) bf16 result, another GEMM and another all-reduce; `--layers` (61) layers,
  captured on communicator G (`torch.distributed.new_group(backend="nccl")`, as SGLang's pynccl holds
  its own communicator); the same graph without all-reduces (GEMMs only) and one of all-reduces only;
- time per step (wall clock over pipelined replays, and CUDA events per replay for p50/p99); per
  all-reduce = (step - GEMMs-only step) / all-reduces per step;
- `wrong`: elements where the replayed graph differs from an eager run of the same step.
Then the safety case: `--safety-steps` replays of the step graph on one stream while eager all-reduces
(prefill-sized, `--eager-rows`) run on a second communicator E from another stream, both checked.

In each `same-comm` pair: the case NCCL documents as unsupported with 0: an eager all-reduce on G, the
graph's own communicator, while a replay is outstanding; outcome ok, wrong, error or hang.

Every pair runs under a watchdog (`--pair-timeout-s`, `--same-comm-timeout-s`) and the whole run under
`--total-timeout-s`: a hang is stopped, printed as a JSON line {"event": "hang", ...} and exits 4.
Output: JSON lines on stdout, OUT/graph_mixing.json, rank logs in OUT/logs/.
Exit: 0 all supported cases ran clean; 1 wrong or error there; 2 bad arguments; 4 a hang there.
`--dry-run` runs the same layer sequence eagerly on CPU with gloo at tiny sizes (no CUDA graph).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HANG = 0, 1, 2, 4
SETTINGS = ("1", "0")  # A = NCCL's default, B = off
# Kept in every rank whatever the caller's environment says (NVLink multicast stays off).
SAFETY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
POLL_S = 0.1
_LIVE: list[subprocess.Popen] = []  # rank processes now running: the run's backstop stops them


def verify_rows() -> tuple[int, ...]:
    from bench.allreduce.sizes import VERIFY_TOKENS

    return tuple(VERIFY_TOKENS)


# ----- arguments -------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="graph_mixing.py", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for graph_mixing.json and logs/")
    p.add_argument("--nranks", type=int, default=2, help="processes per pair, one per GPU (default 2)")
    p.add_argument("--rounds", type=int, default=2, help="A B rounds of main pairs (default 2: 1 0 1 0)")
    p.add_argument("--rows", type=_int_list, default=None,
                   help="verify rows (tokens) per step, comma-separated (default: the kit's verify presets)")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--k", type=int, default=2048, help="inner GEMM dimension: (rows x K) @ (K x hidden)")
    p.add_argument("--layers", type=int, default=61)
    p.add_argument("--replays", type=int, default=200, help="timed replays per graph (default 200)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--safety-steps", type=int, default=10000,
                   help="graph replays with concurrent eager all-reduces on the other communicator")
    p.add_argument("--safety-rows", type=int, default=4, help="rows of the graph in the safety case")
    p.add_argument("--eager-rows", type=int, default=512, help="rows of each eager (prefill) all-reduce")
    p.add_argument("--same-comm-steps", type=int, default=200,
                   help="replays with an eager all-reduce on the graph's own communicator (0: skip)")
    p.add_argument("--pair-timeout-s", type=float, default=240.0, help="watchdog for one main pair")
    p.add_argument("--same-comm-timeout-s", type=float, default=60.0, help="watchdog for one same-comm pair")
    p.add_argument("--total-timeout-s", type=float, default=480.0, help="watchdog for the whole run")
    p.add_argument("--dry-run", action="store_true", help="CPU, gloo, tiny sizes, eager only: checks the tool")
    p.add_argument("--test-hang", default=None, help=argparse.SUPPRESS)  # CASE: rank 1 sleeps in that case
    # internal: one rank of one pair
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--pair-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--case", choices=("main", "same-comm"), default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    for name in ("nranks", "rounds", "hidden", "k", "layers", "replays", "safety_rows", "eager_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("warmup", "safety_steps", "same_comm_steps"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be at least 0")
    for name in ("pair_timeout_s", "same_comm_timeout_s", "total_timeout_s"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.k > args.hidden:
        p.error("--k must be at most --hidden")
    if args.rows is None:
        args.rows = list(verify_rows())
    if args.dry_run:  # tiny sizes: the shape of the run, not its cost
        args.hidden, args.k = min(args.hidden, 64), min(args.k, 16)
        args.replays, args.warmup = min(args.replays, 3), min(args.warmup, 1)
        args.safety_steps, args.same_comm_steps = min(args.safety_steps, 20), min(args.same_comm_steps, 5)
        args.eager_rows = min(args.eager_rows, 8)
    return args


# ----- the schedule ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    label: str
    case: str  # "main" or "same-comm"
    setting: str  # NCCL_GRAPH_MIXING_SUPPORT
    round: int


def schedule(rounds: int, same_comm: bool = True) -> list[Pair]:
    """Main pairs A B A B (1 0 1 0 ...), then the same-comm case once per setting, last: it may hang."""
    pairs = [Pair(f"main-{r}-mix{s}", "main", s, r) for r in range(1, rounds + 1) for s in SETTINGS]
    if same_comm:
        pairs += [Pair(f"same-comm-mix{s}", "same-comm", s, 1) for s in SETTINGS]
    return pairs


# ----- the decode-step shape ---------------------------------------------------------------------


def build_layers(layers: int) -> list[tuple[str, int, int]]:
    """One decode step: per layer (gemm, allreduce, gemm, allreduce), as ("gemm"|"allreduce", layer, half)."""
    return [(op, layer, half) for layer in range(layers) for half in (0, 1) for op in ("gemm", "allreduce")]


def make_weights(layers: int, hidden: int, k: int, rank: int, world: int, device: Any, dtype: Any) -> list:
    """Per layer and half a (K, hidden) shard, seeded per rank; scaled so activations stay near 1."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    scale = 1.0 / (k * world) ** 0.5
    return [[(torch.randn(k, hidden, generator=gen) * scale).to(device=device, dtype=dtype) for _ in (0, 1)]
            for _ in range(layers)]


def run_step(x: Any, weights: list, ops: list[tuple[str, int, int]], allreduce: Any, k: int) -> Any:
    """The step's layer sequence on x (rows, hidden); allreduce(t) reduces in place (None: skip them)."""
    for op, layer, half in ops:
        if op == "gemm":
            x = x.narrow(1, 0, k) @ weights[layer][half]
        elif allreduce is not None:
            allreduce(x)
    return x


# ----- summary and verdict -----------------------------------------------------------------------


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting and rows: step, GEMMs-only and per-all-reduce µs (slowest rank, mean of rounds);
    the safety and same-comm outcomes; and the verdict."""
    per: dict[str, dict[int, dict[str, list[float]]]] = {s: {} for s in SETTINGS}
    wrong = 0
    failures: list[str] = []
    hangs: list[str] = []
    safety: dict[str, list[str]] = {s: [] for s in SETTINGS}
    same_comm: dict[str, str] = {}
    for pair in pairs:
        s, status = pair["setting"], pair["status"]
        if pair["case"] == "same-comm":
            same_comm[s] = pair.get("outcome", status)
            continue
        if status == "hang":
            hangs.append(pair["label"])
        elif status != "ok":
            failures.append(f"{pair['label']}: {pair.get('reason', status)}")
        ranks = [r for r in pair.get("ranks", []) if r]
        for rows_key in sorted({k for r in ranks for k in r.get("perf", {})}, key=int):
            rows = [r["perf"][rows_key] for r in ranks if rows_key in r.get("perf", {})]
            slot = per[s].setdefault(int(rows_key), {"step_us": [], "gemm_only_us": [], "ar_only_us": [],
                                                     "per_allreduce_us": [], "wrong": []})
            step, gemm = max(r["step_us"] for r in rows), max(r["gemm_only_us"] for r in rows)
            n_ar = rows[0]["allreduces_per_step"]
            slot["step_us"].append(step)
            slot["gemm_only_us"].append(gemm)
            slot["ar_only_us"].append(max(r["ar_only_us"] for r in rows) / n_ar)
            slot["per_allreduce_us"].append((step - gemm) / n_ar)
            slot["wrong"].append(sum(r["wrong"] for r in rows))
            wrong += sum(r["wrong"] for r in rows)
        safe = [r.get("safety") for r in ranks if r.get("safety")]
        if status == "hang" and not (safe and all(x.get("done") for x in safe)):
            safety[s].append("hang")
        elif safe:
            bad = sum(x["wrong_graph"] + x["wrong_eager"] for x in safe)
            wrong += bad
            safety[s].append("ok" if bad == 0 and all(x.get("done") for x in safe) else "wrong" if bad else "error")
        elif status != "ok":
            safety[s].append("error")
    table = {
        s: {rows: {key: _mean(vals) for key, vals in slot.items()} | {"rounds": len(slot["step_us"]),
                                                                      "step_us_rounds": slot["step_us"]}
            for rows, slot in sorted(per[s].items())}
        for s in SETTINGS
    }
    cost = {}
    for rows in sorted(set(table["1"]) & set(table["0"])):
        a, b = table["1"][rows], table["0"][rows]
        cost[rows] = {"per_allreduce_us": a["per_allreduce_us"] - b["per_allreduce_us"],
                      "per_step_us": a["step_us"] - b["step_us"]}
    safe_off = bool(safety["0"]) and all(x == "ok" for x in safety["0"])
    verdict = {
        "ok": not failures and not hangs and wrong == 0,
        "mixing_cost": cost,
        "safety": safety,
        "zero_safe_with_other_communicator": safe_off,
        "same_comm_outcome": same_comm,
        "wrong": wrong,
        "failures": failures,
        "hangs": hangs,
    }
    lines = []
    for rows, c in cost.items():
        lines.append(f"rows {rows}: NCCL_GRAPH_MIXING_SUPPORT=1 costs {c['per_allreduce_us']:+.2f} us per "
                     f"all-reduce, {c['per_step_us']:+.1f} us per step, against 0")
    lines.append("0 with eager all-reduces on a second communicator: "
                 + ("safe in every round" if safe_off else f"NOT shown safe ({', '.join(safety['0']) or 'not run'})"))
    for s, outcome in sorted(same_comm.items()):
        lines.append(f"eager call on the graph's own communicator, mixing={s}: {outcome}")
    verdict["text"] = lines
    return {"table": table, "verdict": verdict}


def exit_code(summary: dict[str, Any]) -> int:
    v = summary["verdict"]
    return EXIT_HANG if v["hangs"] else EXIT_FAILED if (v["failures"] or v["wrong"]) else EXIT_OK


# ----- bounded child processes (the watchdog) -----------------------------------------------------


def run_bounded(cmds: list[list[str]], env: dict[str, str], logs: list[Path], timeout_s: float) -> dict[str, Any]:
    """Start every command in its own session; {'status': 'ok'|'failed'|'hang', 'codes', 'elapsed_s'}.

    A command that does not exit within timeout_s is a hang: every process is stopped (SIGTERM, then
    SIGKILL). One that fails stops the others after a short grace.
    """
    from bench.allreduce.launch import stop_ranks

    t0 = time.monotonic()
    procs: list[subprocess.Popen] = []
    try:
        for cmd, log in zip(cmds, logs, strict=True):
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "wb") as fh:
                procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=env, start_new_session=True))
                _LIVE.append(procs[-1])
        failed_at = None
        while True:
            codes = [p.poll() for p in procs]
            elapsed = time.monotonic() - t0
            if all(c is not None for c in codes):
                status = "ok" if all(c == 0 for c in codes) else "failed"
                return {"status": status, "codes": codes, "elapsed_s": round(elapsed, 2)}
            if any(c not in (None, 0) for c in codes):
                failed_at = failed_at or time.monotonic()
                if time.monotonic() - failed_at > 10.0:
                    return {"status": "failed", "codes": codes, "elapsed_s": round(elapsed, 2)}
            if elapsed > timeout_s:
                return {"status": "hang", "codes": codes, "elapsed_s": round(elapsed, 2),
                        "reason": f"no exit within {timeout_s:g} s; stopped"}
            time.sleep(POLL_S)
    finally:
        stop_ranks(procs)
        for p in procs:
            if p in _LIVE:
                _LIVE.remove(p)


def read_progress(pair_dir: Path, rank: int) -> str:
    try:
        return (pair_dir / f"rank{rank}.progress").read_text().strip()
    except FileNotFoundError:
        return "not started"


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


# ----- the driver --------------------------------------------------------------------------------


def rank_env(setting: str, dry_run: bool) -> dict[str, str]:
    """A TP worker's environment (bench allreduce's ranks: SGLang's parent-set variables), the setting,
    and the safety variables."""
    from bench.allreduce.launch import worker_environ

    env = worker_environ(os.environ)
    env.update(SAFETY_ENV)
    env["NCCL_GRAPH_MIXING_SUPPORT"] = setting
    if not dry_run:
        env.setdefault("NCCL_DEBUG", "INFO")  # NCCL's log says "NCCL_GRAPH_MIXING_SUPPORT set by environment"
        env.setdefault("NCCL_DEBUG_SUBSYS", "ENV")
    return env


def _rank_cmd(args: argparse.Namespace, argv: list[str], pair: Pair, pair_dir: Path, rank: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *argv, "--rank", str(rank), "--pair-dir", str(pair_dir),
            "--case", pair.case]


def _nccl_saw(logs: list[Path]) -> list[str]:
    seen = []
    for log in logs:
        try:
            seen += [ln.split("NCCL INFO", 1)[-1].strip() for ln in log.read_text(errors="replace").splitlines()
                     if "NCCL_GRAPH_MIXING_SUPPORT" in ln]
        except FileNotFoundError:
            pass
    return sorted(set(seen))


def run_pair(args: argparse.Namespace, argv: list[str], pair: Pair, work: Path, out: Path,
             deadline: float) -> dict[str, Any]:
    pair_dir = work / pair.label
    pair_dir.mkdir(parents=True)
    logs = [out / "logs" / f"{pair.label}-rank{r}.log" for r in range(args.nranks)]
    timeout = args.pair_timeout_s if pair.case == "main" else args.same_comm_timeout_s
    timeout = max(1.0, min(timeout, deadline - time.monotonic()))
    env = rank_env(pair.setting, args.dry_run)
    if args.test_hang:
        env["GRAPH_MIXING_TEST_HANG"] = args.test_hang
    cmds = [_rank_cmd(args, argv, pair, pair_dir, r) for r in range(args.nranks)]
    run = run_bounded(cmds, env, logs, timeout)
    ranks = []
    for r in range(args.nranks):
        try:
            ranks.append(json.loads((pair_dir / f"rank{r}.json").read_text()))
        except (FileNotFoundError, ValueError):
            ranks.append(None)
    result: dict[str, Any] = {"label": pair.label, "case": pair.case, "setting": pair.setting,
                              "round": pair.round, **run, "ranks": ranks, "nccl_log": _nccl_saw(logs)}
    if run["status"] == "hang":
        result["last_progress"] = {r: read_progress(pair_dir, r) for r in range(args.nranks)}
    elif run["status"] == "failed":
        errors = [r.get("error") for r in ranks if r and r.get("error")]
        result["reason"] = "; ".join(errors) or f"exit codes {run['codes']} (see logs/{pair.label}-rank*.log)"
    if pair.case == "same-comm":
        outs = [r.get("same_comm", {}).get("outcome") for r in ranks if r]
        result["outcome"] = {"hang": "hang", "failed": "error"}.get(run["status"]) or (
            "wrong" if "wrong" in outs else "ok" if outs and all(o == "ok" for o in outs) else "error")
    return result


def drive(args: argparse.Namespace, argv: list[str]) -> int:
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    deadline = t0 + args.total_timeout_s
    results: list[dict[str, Any]] = []

    from bench.allreduce.launch import stop_ranks

    def on_total_timeout() -> None:  # the driver's own watchdog: every pair is bounded, this is the backstop
        emit({"event": "hang", "case": "run", "reason": f"the whole run passed --total-timeout-s "
              f"{args.total_timeout_s:g}", "pairs_done": [r["label"] for r in results]})
        stop_ranks(list(_LIVE))
        os._exit(EXIT_HANG)

    backstop = threading.Timer(args.total_timeout_s + 30.0, on_total_timeout)
    backstop.daemon = True
    backstop.start()
    pairs = schedule(args.rounds, same_comm=args.same_comm_steps > 0)
    emit({"event": "start", "pairs": [p.label for p in pairs], "dry_run": args.dry_run, "rows": args.rows})
    with tempfile.TemporaryDirectory(prefix="graph-mixing-") as tmp:
        for pair in pairs:
            if time.monotonic() >= deadline:
                results.append({"label": pair.label, "case": pair.case, "setting": pair.setting, "round": pair.round,
                                "status": "hang", "reason": "not started: --total-timeout-s reached", "ranks": []})
            else:
                results.append(run_pair(args, argv, pair, Path(tmp), out, deadline))
            r = results[-1]
            event = {"event": "hang" if r["status"] == "hang" else "pair", "label": r["label"], "case": r["case"],
                     "setting": r["setting"], "status": r["status"], "elapsed_s": r.get("elapsed_s")}
            for key in ("reason", "outcome", "last_progress"):
                if key in r:
                    event[key] = r[key]
            emit(event)
    backstop.cancel()
    summary = summarize(results)
    versions = next((r["versions"] for p in results for r in p.get("ranks", []) if r and r.get("versions")), {})
    doc = {"tool": "tools/gpu/graph_mixing.py", "argv": argv, "versions": versions,
           "config": {k: v for k, v in vars(args).items() if k not in ("rank", "pair_dir", "case")},
           "elapsed_s": round(time.monotonic() - t0, 1), "pairs": results, **summary}
    (out / "graph_mixing.json").write_text(json.dumps(doc, indent=1))
    code = exit_code(summary)
    emit({"event": "summary", "exit": code, "versions": versions, "verdict": summary["verdict"]})
    for line in summary["verdict"]["text"]:
        print(line, flush=True)
    return code


# ----- one rank --------------------------------------------------------------------------------


class RankState:
    def __init__(self, pair_dir: Path, rank: int) -> None:
        self.pair_dir, self.rank = pair_dir, rank
        self.result: dict[str, Any] = {"rank": rank, "status": "running"}

    def progress(self, what: str) -> None:
        tmp = self.pair_dir / f"rank{self.rank}.progress.tmp"
        tmp.write_text(f"{time.strftime('%H:%M:%S')} {what}\n")
        os.replace(tmp, self.pair_dir / f"rank{self.rank}.progress")

    def save(self) -> None:  # after every phase: a later hang keeps what was measured
        tmp = self.pair_dir / f"rank{self.rank}.json.tmp"
        tmp.write_text(json.dumps(self.result))
        os.replace(tmp, self.pair_dir / f"rank{self.rank}.json")


def _maybe_test_hang(case: str, rank: int, state: RankState) -> None:
    if os.environ.get("GRAPH_MIXING_TEST_HANG") == case and rank == 1:
        state.progress("test hook: sleeping")
        time.sleep(3600)


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def rank_main(args: argparse.Namespace) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    pair_dir, rank, world = Path(args.pair_dir), args.rank, args.nranks
    state = RankState(pair_dir, rank)
    state.progress("initialising")
    cuda = not args.dry_run
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    timeout = datetime.timedelta(seconds=max(args.pair_timeout_s, args.same_comm_timeout_s) * 2)
    kwargs = {"device_id": device} if cuda else {}
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{pair_dir / 'store'}", rank=rank, world_size=world,
                            timeout=timeout, **kwargs)
    graph_group = dist.new_group(backend=backend)  # G: captured in the graph (SGLang: pynccl's own comm)
    eager_group = dist.new_group(backend=backend)  # E: eager calls (SGLang: prefill through torch's group)
    dtype = torch.bfloat16
    state.result.update(setting=os.environ.get("NCCL_GRAPH_MIXING_SUPPORT"), versions=_versions(device))
    try:
        for group in (graph_group, eager_group):  # communicators are created here, never inside a capture
            warm = torch.ones(8, device=device, dtype=dtype)
            dist.all_reduce(warm, group=group)
        _sync(cuda)
        ops = build_layers(args.layers)
        weights = make_weights(args.layers, args.hidden, args.k, rank, world, device, dtype)
        state.result["allreduces_per_step"] = sum(op == "allreduce" for op, _, _ in ops)
        state.save()
        if args.case == "main":
            state.result["perf"] = {}
            for rows in args.rows:
                state.progress(f"perf rows {rows}")
                state.result["perf"][str(rows)] = _perf(args, ops, weights, rows, graph_group, device, cuda)
                state.save()
            _maybe_test_hang("main", rank, state)
            state.progress("safety")
            state.result["safety"] = _safety(args, ops, weights, graph_group, eager_group, device, cuda, state)
        else:
            _maybe_test_hang("same-comm", rank, state)
            state.progress("same-comm")
            state.result["same_comm"] = _same_comm(args, ops, weights, graph_group, device, cuda, state)
        state.result["status"] = "ok"
        state.save()
        state.progress("done")
        dist.destroy_process_group()
        return 0
    except Exception as exc:
        state.result.update(status="error", error=f"rank {rank}: {type(exc).__name__}: {exc}"[:1000])
        state.save()
        raise


def _versions(device: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if device.type == "cuda":
        info["device"] = torch.cuda.get_device_name(device)
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        info["cuda"] = torch.version.cuda
    else:
        info["device"] = "cpu"
    return info


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _allreduce(group: Any) -> Any:
    import torch.distributed as dist

    return lambda t: dist.all_reduce(t, group=group)


class _Step:
    """One decode step: captured in a CUDA graph (GPU) or called eagerly (dry run)."""

    def __init__(self, fn: Any, x_in: Any, cuda: bool) -> None:
        import torch

        self.cuda, self.fn, self.x_in = cuda, fn, x_in
        self.out = None
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up outside capture (cuBLAS handles, workspaces)
                fn(x_in)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = fn(x_in)

    def __call__(self) -> Any:
        if self.cuda:
            self.graph.replay()
        else:
            self.out = self.fn(self.x_in)
        return self.out


def _time(step: _Step, args: argparse.Namespace, cuda: bool) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    for _ in range(args.warmup):
        step()
    _sync(cuda)
    dist.barrier()
    _sync(cuda)
    t0 = time.perf_counter()
    for _ in range(args.replays):
        step()
    _sync(cuda)
    mean = (time.perf_counter() - t0) * 1e6 / args.replays
    samples = []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.replays)]
        for a, b in ev:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        samples = [a.elapsed_time(b) * 1000.0 for a, b in ev]
    else:
        for _ in range(args.replays):
            t = time.perf_counter()
            step()
            samples.append((time.perf_counter() - t) * 1e6)
    return {"mean": mean, "p50": _percentile(samples, 0.5), "p99": _percentile(samples, 0.99)}


def _input(rows: int, hidden: int, rank: int, device: Any, dtype: Any) -> Any:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(99 + rank)
    return torch.randn(rows, hidden, generator=gen).to(device=device, dtype=dtype)


def _perf(args, ops, weights, rows, group, device, cuda) -> dict[str, Any]:
    import torch

    dtype = torch.bfloat16
    x_in = _input(rows, args.hidden, args.rank, device, dtype)
    ar = _allreduce(group)
    reference = run_step(x_in.clone(), weights, ops, ar, args.k)  # eager, same kernels, same communicator
    _sync(cuda)
    full = _Step(lambda x: run_step(x, weights, ops, ar, args.k), x_in, cuda)
    out = full().clone()
    _sync(cuda)
    wrong = int((out != reference).sum().item())
    max_diff = float((out.float() - reference.float()).abs().max().item())
    timed_full = _time(full, args, cuda)
    del full
    gemms = _Step(lambda x: run_step(x, weights, ops, None, args.k), x_in, cuda)
    timed_gemm = _time(gemms, args, cuda)
    del gemms
    buf = torch.zeros(rows, args.hidden, device=device, dtype=dtype)
    n_ar = sum(op == "allreduce" for op, _, _ in ops)

    def ars(x: Any) -> Any:
        for _ in range(n_ar):
            ar(x)
        return x

    only_ar = _Step(ars, buf, cuda)
    timed_ar = _time(only_ar, args, cuda)
    del only_ar
    return {"rows": rows, "message_B": rows * args.hidden * 2, "allreduces_per_step": n_ar, "wrong": wrong,
            "max_abs_diff": max_diff, "step_us": timed_full["mean"], "step_us_p50": timed_full["p50"],
            "step_us_p99": timed_full["p99"], "gemm_only_us": timed_gemm["mean"], "ar_only_us": timed_ar["mean"],
            "per_allreduce_us": (timed_full["mean"] - timed_gemm["mean"]) / n_ar,
            "method": f"wall clock over {args.replays} pipelined replays after {args.warmup} warm-up; "
                      "p50/p99: CUDA events per replay"}


def _safety(args, ops, weights, graph_group, eager_group, device, cuda, state) -> dict[str, Any]:
    """Graph replays on one stream, eager all-reduces on the other communicator from another stream."""
    import torch
    import torch.distributed as dist

    step, reference, pattern, expected, ebuf, other = _graph_and_eager(args, ops, weights, graph_group, device, cuda,
                                                                        eager_n=args.eager_rows * args.hidden)
    wrong_graph = torch.zeros((), device=device, dtype=torch.int64)
    wrong_eager = torch.zeros((), device=device, dtype=torch.int64)
    _sync(cuda)
    dist.barrier()
    t0 = time.perf_counter()
    done = 0
    for i in range(args.safety_steps):
        out = step()
        wrong_graph += (out != reference).sum()
        wrong_eager += _eager_allreduce(ebuf, pattern, expected, eager_group, other)
        done = i + 1
        if done % 500 == 0:
            _sync(cuda)
            state.progress(f"safety {done}/{args.safety_steps}")
    _sync(cuda)
    elapsed = time.perf_counter() - t0
    return {"steps": done, "done": done == args.safety_steps, "rows": args.safety_rows,
            "eager_rows": args.eager_rows, "wrong_graph": int(wrong_graph.item()),
            "wrong_eager": int(wrong_eager.item()), "elapsed_s": round(elapsed, 2),
            "us_per_step": elapsed * 1e6 / max(done, 1)}


def _graph_and_eager(args, ops, weights, graph_group, device, cuda, eager_n):
    """What both concurrency cases replay and run beside it: the captured step and its eager reference;
    an eager buffer of `eager_n` elements, its per-rank pattern (small integers: the sum over ranks is
    exact in bf16) and that sum; the side stream (None on CPU)."""
    import torch

    dtype = torch.bfloat16
    x_in = _input(args.safety_rows, args.hidden, args.rank, device, dtype)
    ar = _allreduce(graph_group)
    reference = run_step(x_in.clone(), weights, ops, ar, args.k)
    step = _Step(lambda x: run_step(x, weights, ops, ar, args.k), x_in, cuda)
    idx = torch.arange(eager_n, device=device)
    pattern = ((idx + 3 * args.rank) % 5 + 1).to(dtype)
    expected = sum(((idx + 3 * r) % 5 + 1).to(torch.float32) for r in range(args.nranks)).to(dtype)
    ebuf = torch.empty(eager_n, device=device, dtype=dtype)
    return step, reference, pattern, expected, ebuf, torch.cuda.Stream() if cuda else None


def _eager_allreduce(ebuf, pattern, expected, group, stream):
    """One eager all-reduce of a known pattern on `group`, from `stream` when given (CUDA); the count of
    wrong elements, as a tensor (no synchronisation)."""
    import contextlib

    import torch
    import torch.distributed as dist

    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        ebuf.copy_(pattern)
        dist.all_reduce(ebuf, group=group)
        return (ebuf != expected).sum()


def _same_comm(args, ops, weights, graph_group, device, cuda, state) -> dict[str, Any]:
    """The case NCCL documents as unsupported with 0: an eager call on the graph's communicator while a
    replay is outstanding (no synchronisation between them)."""
    import torch

    step, reference, pattern, expected, ebuf, other = _graph_and_eager(args, ops, weights, graph_group, device, cuda,
                                                                        eager_n=4 * args.hidden)
    wrong_graph = torch.zeros((), device=device, dtype=torch.int64)
    wrong_eager = torch.zeros((), device=device, dtype=torch.int64)
    _sync(cuda)
    t0 = time.perf_counter()
    for i in range(args.same_comm_steps):
        out = step()  # outstanding: not waited for
        wrong_eager += _eager_allreduce(ebuf, pattern, expected, graph_group, other)
        wrong_graph += (out != reference).sum()
        if (i + 1) % 50 == 0:
            state.progress(f"same-comm {i + 1}/{args.same_comm_steps} enqueued")
    state.progress("same-comm: synchronising")
    _sync(cuda)
    wg, we = int(wrong_graph.item()), int(wrong_eager.item())
    return {"steps": args.same_comm_steps, "wrong_graph": wg, "wrong_eager": we,
            "elapsed_s": round(time.perf_counter() - t0, 2), "outcome": "ok" if wg == we == 0 else "wrong"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    return drive(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
