"""`bench` command line: each subcommand's module parses the rest of the arguments."""

from __future__ import annotations

import importlib
import sys

from launcher import __version__

COMMANDS = {
    "run": ("bench.run.cli", "every profile x spec mode end to end, into a results bundle"),
    "report": ("bench.report.render", "rebuild summary and plots of a bundle"),
    "compare": ("bench.report.compare", "deltas between two bundles, against run-to-run spread"),
    "allreduce": ("bench.allreduce.cli", "nccl-tests-style all-reduce microbench over local ranks"),
    "trace": ("bench.trace", "where GPU time goes in a torch-profiler trace"),
    "predict": ("bench.predict", "verify cost model: predicted tok/s and break-even accept length"),
    "gate": ("bench.gate.cli", "the correctness gate alone: two servers, or a bundle judged again"),
    "tune": ("bench.tune.cli", "the fastest correct setup for this host within a budget, decided beyond noise"),
    "sla": ("bench.sla.cli", "the highest request rate each profile x spec holds within p99 TTFT/TPOT targets"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: bench [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines.append("\n`bench COMMAND --help` for each command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"bench {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"bench: unknown command '{argv[0]}'\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
