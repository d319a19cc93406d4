#!/usr/bin/env python3
"""Prometheus file_sd targets for the kit (docs/monitoring.md): the compose stack, or every host of a fleet.

    python3 docker/monitoring/targets.py --out docker/monitoring/targets
        the compose stack's server as Prometheus's container reaches it (server:30000, server:30100)
    python3 docker/monitoring/targets.py --fleet fleet.toml --out docker/monitoring/targets
        every [[host]]'s server and control API, and the router's exporter (router.prometheus)

Writes sglang.json, kit-control.json and sglang-router.json (the files prometheus.yml reads); each
target is labelled `host` (the fleet file's name, `local` for the compose stack) and `fleet` (the
fleet file's stem, `local`). The fleet file is read and checked by the kit (launcher.fleet.fleetfile:
run this with the kit's Python, `make monitor FLEET=...` does); the local form needs Python 3.11 alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent.parent
JOBS = ("sglang", "kit-control", "sglang-router")


def _hostport(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc


def local_targets(server: str, control: str) -> dict[str, list[dict]]:
    labels = {"host": "local", "fleet": "local"}
    return {
        "sglang": [{"targets": [server], "labels": labels}],
        "kit-control": [{"targets": [control], "labels": labels}],
        "sglang-router": [],
    }


def fleet_targets(fleet_file: Path) -> dict[str, list[dict]]:
    sys.path.insert(0, str(REPO))
    from launcher.fleet import fleetfile

    fleet = fleetfile.load(fleet_file)
    name = fleet_file.stem
    out: dict[str, list[dict]] = {job: [] for job in JOBS}
    for host in fleet.host:
        labels = {"host": host.name, "fleet": name}
        out["sglang"].append({"targets": [_hostport(host.server)], "labels": labels})
        out["kit-control"].append({"targets": [_hostport(host.control)], "labels": labels})
    out["sglang-router"].append({"targets": [fleet.router.prometheus], "labels": {"host": "router", "fleet": name}})
    return out


def write(targets: dict[str, list[dict]], out_dir: Path) -> list[Path]:
    """Each job's file, replaced atomically (Prometheus rereads a file_sd file when it changes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for job in JOBS:
        path = out_dir / f"{job}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(targets[job], indent=2) + "\n")
        os.replace(tmp, path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0], allow_abbrev=False)
    p.add_argument("--fleet", type=Path, help="fleet file (docs/fleet.md): every host and the router")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "targets",
                   help="folder Prometheus reads targets from (default: docker/monitoring/targets)")
    p.add_argument("--server", default="server:30000", help="without --fleet: SGLang's host:port (default server:30000)")
    p.add_argument("--control", default="server:30100",
                   help="without --fleet: the control API's host:port (default server:30100)")
    args = p.parse_args(argv)
    if args.fleet is not None:
        try:
            targets = fleet_targets(args.fleet)
        except Exception as e:  # UserError (exit 2) names the file and key
            print(f"targets.py: {e}", file=sys.stderr)
            return 2
    else:
        targets = local_targets(args.server, args.control)
    for path in write(targets, args.out):
        n = sum(len(g["targets"]) for g in targets[path.stem])
        print(f"{path}: {n} target{'s' if n != 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
