"""`bench allreduce`: nccl-tests-style all-reduce latency per backend at verify-sized messages.

Every input is checked before any rank process starts (exit 2 on a mistake); a backend that cannot run
here becomes a `skipped` row; a rank that stops making progress for --timeout-s is named and the
command exits 1 after writing whatever was measured. Every backend that runs is checked exactly first
(exact.py): its verdict (PASS, FAIL with the first wrong element, `not run: why`) is in every row and in
the printed table, and a FAIL exits 1. `--exact-only` runs that check alone (the server's start check).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bench.allreduce.sizes import DTYPES, default_sizes, parse_sizes, verify_sizes
from bench.args import CliArgs, entry_point
from launcher.errors import RuntimeFailure, UserError

if TYPE_CHECKING:  # pydantic is imported once the inputs are checked
    from bench.allreduce.records import ResultRow, RunSettings


@dataclass(frozen=True, kw_only=True)
class AllreduceArgs(CliArgs):
    """The flags of `bench allreduce`; `check()` refuses bad numbers before any rank starts."""

    prog: ClassVar[str] = "bench allreduce"
    description: ClassVar[str] = (
        "All-reduce latency and bus bandwidth per backend (nccl-tests style), over N local ranks."
    )
    parser_options: ClassVar[dict[str, Any]] = {"allow_abbrev": False}

    out: str
    backends: str | None = None
    nranks: int | None = None
    sizes: str | None = None
    hidden: int = 7168
    dtype: str = "bf16"
    iters: int = 200
    warmup: int = 20
    graph: bool = False
    graph_calls: int = 20
    graph_launches: int = 10
    profile: str | None = None
    timeout_s: float = 120.0
    host_facts: str | None = None
    with_nccl_tests: bool = False
    nccl_tests_bin: str | None = None
    exact_only: bool = False
    plan: str | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        from bench.allreduce.registry import KNOWN_BACKENDS

        p = parser
        p.add_argument(
            "--backends",
            help=f"comma-separated, from: {', '.join(KNOWN_BACKENDS)} "
            "(default: all but gloo with a CUDA device, else gloo)",
        )
        p.add_argument("--nranks", type=int, help="local ranks, one per GPU (default: visible GPUs, or 2 for gloo)")
        p.add_argument(
            "--sizes",
            help="comma-separated bytes, e.g. 4K,43008,1M (default: tokens {1,2,3,4,8,16,32} x hidden x dtype, "
            "plus 4K..1M in powers of two; with --exact-only the tokens x hidden sizes alone)",
        )
        p.add_argument("--hidden", type=int, default=7168,
                       help="model hidden size for the verify shapes (default 7168)")
        p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
        p.add_argument("--iters", type=int, default=200, help="timed iterations per size (default 200)")
        p.add_argument("--warmup", type=int, default=20, help="untimed warm-up iterations per size (default 20)")
        p.add_argument("--graph", action="store_true", help="capture the calls in a CUDA graph and time replays")
        p.add_argument("--graph-calls", type=int, default=20,
                       help="all-reduces per captured graph, as nccl-tests -n in graph mode (default 20)")
        p.add_argument("--graph-launches", type=int, default=10,
                       help="back-to-back replays of that graph timed for time_us, as nccl-tests -G (default 10)")
        p.add_argument("--profile", help="start every rank as the server's TP workers start under this kit profile: "
                       "its rendered env applied by sitecustomize, over the variables SGLang sets itself")
        p.add_argument("--plan", help="as --profile, from a rendered plan (the state dir's profile.json: what the server "
                       "runs, spec mode and overlay included)")
        p.add_argument("--exact-only", action="store_true",
                       help="only the exact check (integer sums compared element by element over several calls, and "
                            "graph replays with --graph): no warm-up, no timing, no plot")
        p.add_argument("--timeout-s", type=float, default=120.0, help="stop when no rank progresses for this long")
        p.add_argument("--host-facts", help="`launcher doctor --json` output; draws the physical floor for its link")
        p.add_argument("--with-nccl-tests", action="store_true",
                       help="also run nccl-tests' all_reduce_perf at the same sizes, environment and call counts, "
                            "and print both side by side (needs CUDA)")
        p.add_argument("--nccl-tests-bin", help="all_reduce_perf to run (default $KIT_NCCL_TESTS_BIN, else PATH)")
        p.add_argument("--out", required=True, help="directory for allreduce.json/.csv/.png and rank logs")
        return p

    def check(self) -> None:
        """Exit 2 on a number no run could use."""
        for name, minimum in (("iters", 1), ("warmup", 0), ("hidden", 1), ("graph_calls", 1),
                              ("graph_launches", 1)):
            if getattr(self, name) < minimum:
                raise UserError(f"--{name.replace('_', '-')} must be at least {minimum}, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise UserError(f"--timeout-s must be positive, got {self.timeout_s}")
        if self.nranks is not None and self.nranks < 1:
            raise UserError(f"--nranks must be at least 1, got {self.nranks}")
        if self.profile and self.plan:
            raise UserError("--profile and --plan both name the ranks' environment; give one")
        if self.exact_only and self.with_nccl_tests:
            raise UserError("--exact-only times nothing, so there is nothing to put beside nccl-tests; drop one")


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.version.cuda is not None else 0


def _backend_names(text: str | None) -> list[str] | None:
    """Requested names, checked; None means the default (which depends on whether CUDA is present)."""
    from bench.allreduce.registry import KNOWN_BACKENDS

    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN_BACKENDS]
    if unknown or not names:
        raise UserError(
            f"--backends: unknown backend {', '.join(repr(n) for n in unknown) or '(none given)'}; "
            f"known: {', '.join(KNOWN_BACKENDS)}"
        )
    return list(dict.fromkeys(names))


def _rendered_plan(path: str) -> Any:
    """--plan: a plan as `launcher` renders it (profile.json), read as the server reads it."""
    import json

    from launcher.profiles.plan import Plan

    try:
        return Plan.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise UserError(f"--plan {path}: not a rendered plan ({type(exc).__name__}: {exc}); give the state "
                        "dir's profile.json") from None


def _profile_plan(name: str | None, plan_path: str | None = None) -> Any:
    """The plan the server would get for this profile (spec mode 'off'), the rendered one of --plan, or None."""
    if plan_path:
        return _rendered_plan(plan_path)
    if not name:
        return None
    from launcher.profiles.plan import build_plan, check_environ

    # Server flags (model path, ports) do not matter here: unset variables there become placeholders.
    environ = check_environ()
    plan = build_plan(name, spec="off", environ=environ)
    for key, value in plan.env.items():
        missing = sorted(n for n in environ.used if f"<{n}>" in value)
        if missing:
            raise UserError(
                f"profile '{name}': env {key} needs {', '.join(missing)}; export it and run again"
            )
    return plan


def _ranks_environ(plan: Any, state_dir: Path) -> dict[str, str]:
    """The ranks' environment, as the server's TP workers get theirs: the plan rendered into
    `state_dir` (profile.env, as `launcher` renders it for the server), named by KIT_PROFILE_ENV and
    applied by sitecustomize in each rank, over what SGLang's launcher sets itself."""
    import os

    from bench.allreduce.launch import worker_environ

    if plan is None:
        return worker_environ(os.environ)
    from launcher.atomic import write_text
    from launcher.profiles.render import PLAN_FILE_MODE, env_file_text
    from launcher.state_layout import StatePaths

    # profile.env alone, as `launcher` renders it: nothing else of the plan (its adaptive config) is written
    env_file = write_text(StatePaths(state_dir).profile_env, env_file_text(plan), PLAN_FILE_MODE)
    return worker_environ(os.environ, env_file, plan.flags)


def _link(host_facts: str | None) -> Any:
    if not host_facts:
        return None
    from bench.allreduce.floor import link_for
    from launcher.profiles.hostfacts import load_host_facts

    return link_for(load_host_facts(host_facts).interconnect)


def plan_backends(backends: list[Any], nranks: int, cuda_devices: int) -> list[tuple[Any, str | None]]:
    """(backend, skip reason or None) for each; UserError when a runnable CUDA backend lacks devices."""
    planned: list[tuple[Any, str | None]] = []
    for backend in backends:
        try:
            reason = backend.probe()
        except Exception as exc:  # a broken optional library is a skip, not a crash
            reason = f"probe failed: {type(exc).__name__}: {exc}"
        if reason is None and backend.device_type == "cuda" and nranks > cuda_devices:
            raise UserError(
                f"--nranks {nranks}: backend '{backend.name}' needs one CUDA device per rank, but "
                f"{cuda_devices} are visible; lower --nranks or check CUDA_VISIBLE_DEVICES"
            )
        planned.append((backend, reason))
    return planned


def _with_nccl_tests(*, binary: Path, run: RunSettings, kit_rows: list[ResultRow], out_dir: Path,
                     console: Any, env: dict[str, str]) -> list[ResultRow]:
    """The kit's rows, compared with nccl-tests' at each size, then nccl-tests' own rows: run in the kit's
    ranks' environment (profile, SGLang's own variables, NCCL safety settings)."""
    from bench.allreduce import nccl_tests

    with console.status(f"nccl-tests: {len(run.sizes)} sizes"):
        results = nccl_tests.run_sizes(binary, run, env, out_dir / "logs", run.timeout_s)
    rows = nccl_tests.as_rows(results, run)
    return [*nccl_tests.compare(kit_rows, rows), *rows]


def run_main(args: AllreduceArgs) -> int:
    """Every backend over the same sizes and ranks; exit 1 when a backend failed or summed wrong."""
    from bench.allreduce.registry import KNOWN_BACKENDS, iter_backends

    args.check()
    if args.sizes:
        sizes = parse_sizes(args.sizes, args.dtype)
    else:
        sizes = (verify_sizes if args.exact_only else default_sizes)(args.hidden, args.dtype)
    names = _backend_names(args.backends)
    link = _link(args.host_facts)
    plan = _profile_plan(args.profile, args.plan)
    cuda_devices = _cuda_device_count()
    if names is None:
        names = [n for n in KNOWN_BACKENDS if n != "gloo"] if cuda_devices else ["gloo"]
    backends = list(iter_backends(names))
    uses_cuda = any(b.device_type == "cuda" for b in backends)
    nranks = args.nranks if args.nranks is not None else (max(cuda_devices, 1) if uses_cuda else 2)

    planned = plan_backends(backends, nranks, cuda_devices)
    nccl_tests_bin = None
    if args.with_nccl_tests:
        from bench.allreduce import nccl_tests

        if nranks > cuda_devices:
            raise UserError(f"--with-nccl-tests: nccl-tests needs one CUDA device per rank; {cuda_devices} are "
                            f"visible for --nranks {nranks}")
        nccl_tests_bin = nccl_tests.find_binary(args.nccl_tests_bin)

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kit-allreduce-profile-") as state_dir:
        ranks_env = _ranks_environ(plan, Path(state_dir))
        run = _settings(args, sizes=sizes, nranks=nranks, plan=plan)
        return _run_backends(args, planned=planned, run=run, link=link, ranks_env=ranks_env,
                             nccl_tests_bin=nccl_tests_bin, out_dir=out_dir)


def _settings(args: AllreduceArgs, *, sizes: list[int], nranks: int, plan: Any) -> RunSettings:
    """What every backend runs with: the flags, and the profile's name and env from the plan."""
    from bench.allreduce.records import RunSettings

    return RunSettings(
        nranks=nranks, sizes=sizes, dtype=args.dtype, hidden=args.hidden, iters=args.iters, warmup=args.warmup,
        graph=args.graph, graph_calls=args.graph_calls, graph_launches=args.graph_launches,
        timeout_s=args.timeout_s, profile=plan.name if plan is not None else None,
        profile_env=dict(plan.env) if plan is not None else {}, exact_only=args.exact_only,
    )


def _console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # files and pipes: wide enough that no column header is cut
        console = Console(width=max(console.width, 140))
    return console


def _backend_rows(backend: Any, reason: str | None, run: RunSettings, *, link: Any, ranks_env: dict[str, str],
                  out_dir: Path, console: Any) -> list[ResultRow]:
    """One backend's rows: its ranks started and watched, or the reason it was skipped."""
    from bench.allreduce.launch import run_backend
    from bench.allreduce.records import BackendRun
    from bench.allreduce.results import rows_for

    if reason is not None:
        outcome = BackendRun(status="unavailable", reason=reason)
    else:
        if run.graph and backend.device_type != "cuda":
            console.print(f"[dim]{backend.name}: --graph does not apply to a CPU backend; timing eager calls[/dim]")
        with console.status(f"{backend.name}: starting {run.nranks} ranks") as status:
            outcome = run_backend(
                backend.name,
                run,
                out_dir / "logs",
                on_progress=lambda seen, name=backend.name: status.update(
                    f"{name}: " + " | ".join(f"rank {r}: {what}" for r, (_, what) in enumerate(seen))
                ),
                env=ranks_env,
            )
    return rows_for(run, backend.name, backend.device_type, outcome, link)


def _run_backends(args: AllreduceArgs, *, planned: list[tuple[Any, str | None]], run: RunSettings, link: Any,
                  ranks_env: dict[str, str], nccl_tests_bin: Path | None, out_dir: Path) -> int:
    """Every planned backend, then nccl-tests beside them; the tables, the files, and the exit status."""
    from bench.allreduce import output

    console = _console()
    rows = [row for backend, reason in planned
            for row in _backend_rows(backend, reason, run, link=link, ranks_env=ranks_env, out_dir=out_dir,
                                     console=console)]
    if nccl_tests_bin is not None:
        rows = _with_nccl_tests(binary=nccl_tests_bin, run=run, kit_rows=rows, out_dir=out_dir, console=console,
                                env=ranks_env)
    if not args.exact_only:
        output.print_table(rows, console)
    if nccl_tests_bin is not None:
        output.print_comparison(rows, console)
    output.print_exact(rows, console)
    written = output.write_all(out_dir, rows, link, plot=not args.exact_only)
    console.print("wrote " + ", ".join(str(p) for p in written))
    problems = _problems(rows, output.exact_verdicts(rows).values())
    if problems:
        raise RuntimeFailure("; ".join(problems))
    return 0


def _problems(rows: list[ResultRow], verdicts: Iterable[str]) -> list[str]:
    """What makes the command exit 1: a failed backend, nccl-tests' own wrong elements, an exactness FAIL."""
    problems = [f"{r.backend}: {r.reason}" for r in rows if r.status == "failed"]
    problems += [f"{r.backend}: {r.wrong} wrong elements at {r.size_B} B"  # nccl-tests' own check
                 for r in rows if r.status == "ok" and r.wrong and not r.has("exact")]
    problems += [f"exact check {text}" for text in verdicts if text.startswith("FAIL")]
    return problems


main = entry_point(AllreduceArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
