"""`launcher doctor`: is this host fit, and which profiles can run on it (and why not)?

Exit status: 0 when no check failed, 1 when one did, 2 for unreadable or unrecognised input files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from launcher import settings
from launcher.atomic import write_json
from launcher.doctor import diagnose, nccl, report
from launcher.doctor.probe import Probe
from launcher.errors import UserError, run_cli
from launcher.profiles.loader import spec_modes

ROOT_ENV = settings.KIT_DOCTOR_ROOT.name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launcher doctor",
        description="Check this host (GPUs, links, P2P, kernel, limits, NCCL, Docker) and which profiles can run on it.",
        epilog="Exit status: 0 all checks pass or warn, 1 a check failed, 2 an input file is unreadable or not nvidia-smi output.",
    )
    p.add_argument("--json", action="store_true", help="print JSON (a superset of HostFacts) instead of tables")
    p.add_argument("--out", metavar="FILE", help="also write the JSON to FILE atomically (usable as --host-facts)")
    p.add_argument("--topo-file", metavar="F", help="saved `nvidia-smi topo -m` output instead of running it")
    p.add_argument("--p2p-file", metavar="F", help="saved `nvidia-smi topo -p2p r` output")
    p.add_argument(
        "--gpus-file",
        metavar="F",
        help="saved `nvidia-smi --query-gpu=name,compute_cap,driver_version,pci.bus_id --format=csv` output",
    )
    p.add_argument(
        "--power-file",
        metavar="F",
        help="saved `nvidia-smi --query-gpu=index,power.limit,power.default_limit,power.min_limit,power.max_limit "
        "--format=csv,noheader,nounits` output (optional: without it, power limits are read live or shown unknown)",
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        default=None,
        help=f"read /proc, /sys and /dev/shm under DIR (default /, or ${ROOT_ENV}); for saved copies of another host",
    )
    p.add_argument("--nccl-version", metavar="X.Y.Z", help="NCCL version to judge instead of probing torch/libnccl")
    p.add_argument("--spec", default="off", help="speculation mode used for the eligibility matrix (default off)")
    return p


def _run(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else settings.KIT_DOCTOR_ROOT.get()
    if not root.is_dir():
        raise UserError(f"--root {root}: not a directory; pass the folder that holds proc/ and sys/")
    if args.nccl_version and nccl.parse_version(args.nccl_version) is None:
        raise UserError(f"--nccl-version '{args.nccl_version}': not a version; write it as X.Y.Z, e.g. 2.27.7")
    if args.spec not in spec_modes():
        raise UserError(f"--spec {args.spec}: unknown speculation mode; known: {', '.join(spec_modes())}")
    files = {
        "topo": Path(args.topo_file) if args.topo_file else None,
        "p2p": Path(args.p2p_file) if args.p2p_file else None,
        "gpus": Path(args.gpus_file) if args.gpus_file else None,
        "power": Path(args.power_file) if args.power_file else None,
    }
    result = diagnose.run(Probe(root=root), files, nccl_version=args.nccl_version, spec=args.spec)
    data = result.to_json()
    if args.out:
        try:
            write_json(args.out, data)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write ({exc.strerror}); pick a writable path") from exc
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        if args.out:  # stdout is the JSON alone; where the file went goes to stderr
            print(f"launcher doctor: host facts written to {args.out}", file=sys.stderr)
    else:
        report.render(result, Console(), saved=args.out)
    return 1 if result.failed else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_cli(lambda: _run(args))


if __name__ == "__main__":
    raise SystemExit(main())
