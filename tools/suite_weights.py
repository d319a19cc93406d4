"""Write tests/file_seconds.json, the seconds each test file took in `make test` runs, from their JUnit XML.

`make test` hands whole files to its workers (`--dist loadfile`) in the order tests/conftest.py gives
them: the heaviest first, so the last file a worker takes is a short one and no worker runs alone at the
end. Refresh the weights after tests are added or sped up:

    make test TEST_ARGS=--junitxml=/tmp/run1.xml     # once or more
    python tools/suite_weights.py /tmp/run1.xml [/tmp/run2.xml ...]

A file's weight is its median over the runs given (seconds, setup and teardown included); files under
MIN_SECONDS are left out and run after the weighed ones, in collection order.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "tests" / "file_seconds.json"
MIN_SECONDS = 5.0


def file_seconds(xml_path: Path) -> Counter[str]:
    """Seconds per test file (`tests/x.py`) in one JUnit XML report."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(xml_path).iter("testcase"):
        module = (case.get("classname") or "").split("::")[0]
        parts = module.split(".")
        while parts and not parts[-1].startswith("test_"):  # a class inside the module
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return seconds


def weights(runs: list[Counter[str]]) -> dict[str, float]:
    """The median seconds of each file over the runs (0 where a run lacks it), heaviest first."""
    names = {name for run in runs for name in run}
    median = {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}
    return {name: round(s, 1) for name, s in sorted(median.items(), key=lambda kv: (-kv[1], kv[0]))
            if s >= MIN_SECONDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML of make test runs")
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    args = parser.parse_args(argv)
    runs = []
    for report in args.reports:
        try:
            runs.append(file_seconds(report))
        except (OSError, ET.ParseError) as exc:
            print(f"suite_weights: {report}: not a readable JUnit XML report ({exc}); pass the file that "
                  "make test TEST_ARGS=--junitxml=FILE wrote", file=sys.stderr)
            return 2
    table = weights(runs)
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(table)} files, {sum(table.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
