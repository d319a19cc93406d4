"""`bench trace FILE` or `bench trace --url URL --steps N`: how much of each step is communication."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bench.args import CliArgs, ParserOptions, entry_point, print_result
from launcher.errors import UserError

EPILOG = """step markers recognised: SGLang's step[VERIFY ..]/step[DECODE ..]/step[DRAFT ..]/step[EXTEND ..]
spans, its verify/draft/draft_extend stage spans, else any annotation naming verify, decode, draft,
prefill/extend, forward or ProfilerStep#N. Communication kernels: NCCL, FlashInfer PCIe IPC,
TensorRT-LLM/FlashInfer fused all-reduce, SGLang/vLLM custom all-reduce, torch symmetric memory,
MSCCL++, DeepEP dispatch/combine, peer-to-peer copies."""


@dataclass(frozen=True, kw_only=True)
class TraceArgs(CliArgs):
    """The flags of `bench trace`: a trace FILE to analyse, or a server --url to capture one from."""

    prog: ClassVar[str] = "bench trace"
    description: ClassVar[str] = (
        "Analyse a torch-profiler Chrome trace (.json/.json.gz), or capture one from a running server."
    )
    parser_options: ClassVar[ParserOptions] = {
        "epilog": EPILOG, "formatter_class": argparse.RawDescriptionHelpFormatter, "allow_abbrev": False,
    }

    file: str | None = None
    url: str | None = None
    steps: int = 8
    out: str | None = None
    server_dir: str | None = None
    no_load: bool = False
    timeout_s: float = 120.0
    json: bool = False

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = parser
        p.add_argument("file", nargs="?", help="trace file to analyse")
        p.add_argument("--url", help="server to capture from, e.g. http://127.0.0.1:30000")
        p.add_argument("--steps", type=int, default=8, help="forward steps to profile with --url (default 8)")
        p.add_argument("--out", help="directory the server writes the trace to (default results/traces)")
        p.add_argument("--server-dir", help="the same directory as the server sees it, if it differs (containers)")
        p.add_argument("--no-load", action="store_true", help="do not send a request to drive steps while profiling")
        p.add_argument("--timeout-s", type=float, default=120.0, help="how long to wait for the trace (default 120)")
        p.add_argument("--json", action="store_true", help="print the analysis as JSON")
        return p


def run_main(args: TraceArgs) -> int:
    """Capture (with --url) or read the trace, then print its analysis."""
    from bench.trace.analyse import analyse_events
    from bench.trace.load import load_events

    if bool(args.file) == bool(args.url):
        raise UserError("give either a trace FILE or --url URL (with --steps N), not both or neither")
    if args.file:
        path = Path(args.file)
    else:
        from bench.trace.capture import capture

        assert args.url is not None
        out = Path(args.out or "results/traces")
        path = capture(args.url, args.steps, out, args.server_dir, not args.no_load, args.timeout_s)
        print(f"captured {path}", file=sys.stderr)
    from bench.trace.report import print_report

    result = analyse_events(load_events(path), file=str(path))
    return print_result(result.to_json(), as_json=args.json, render=lambda _: print_report(result))


main = entry_point(TraceArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
