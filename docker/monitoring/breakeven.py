#!/usr/bin/env python3
"""SpeculationNotPaying's threshold from `bench predict --json`: one recording rule per profile and spec.

    bench predict --compute-ms 20 --allreduces 122 --allreduce-json allreduce.json --tokens 4 \\
        --draft-ms 3 --bundle results/<run> --json > custom-ar.json
    python3 docker/monitoring/breakeven.py --profile custom-ar --spec eagle3 custom-ar.json \\
        [--profile nccl-tuned --spec eagle3 nccl-tuned.json ...] --out docker/monitoring/rules/breakeven.yml

Each input is one `bench predict --json` result for that profile (its all-reduce latency in the
prediction); its top-level `breakeven_accept_len` (the first scenario) becomes

    kit:spec_breakeven_accept_length{profile="custom-ar", spec="eagle3"}  2.9167

which the alert compares with SGLang's sglang:spec_accept_length on hosts running that plan.
`--scenario LABEL` picks another scenario of the result (its `label`, e.g. `nccl @ 57344 B`).
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")  # the kit's profile name rule
HEADER = "# Written by docker/monitoring/breakeven.py from `bench predict --json`; rerun it to change.\n"


class Bad(Exception):
    pass


def breakeven(result: dict, scenario: str | None) -> float:
    if scenario is not None:
        found = [s for s in result.get("scenarios") or [] if s.get("label") == scenario]
        if not found:
            labels = [s.get("label") for s in result.get("scenarios") or []]
            raise Bad(f"no scenario labelled {scenario!r} (the result has {labels})")
        result = found[0]
    value = result.get("breakeven_accept_len")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise Bad("breakeven_accept_len is missing or not a positive number: bench predict needs a baseline "
                  "(--baseline-tokps, --decode-ms or --bundle with baseline__off.json)")
    return float(value)


def render(entries: list[tuple[str, str, float, str]]) -> str:
    lines = [HEADER, "groups:\n", "  - name: kit-breakeven\n"]
    if not entries:
        lines.append("    rules: []\n")
        return "".join(lines)
    lines.append("    rules:\n")
    for profile, spec, value, source in entries:
        lines += [
            f"      # {source}\n",
            "      - record: kit:spec_breakeven_accept_length\n",
            f"        expr: vector({value!r})\n",
            "        labels:\n",
            f"          profile: {json.dumps(profile)}\n",
            f"          spec: {json.dumps(spec)}\n",
        ]
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0], allow_abbrev=False,
                                usage="breakeven.py --profile P --spec S PREDICT_JSON [--profile ...] --out FILE")
    p.add_argument("--out", type=Path, required=True, help="rules file to write (docker/monitoring/rules/breakeven.yml)")
    p.add_argument("--scenario", help="a scenario's label instead of the first")
    p.add_argument("--profile", action="append", default=[], required=True)
    p.add_argument("--spec", action="append", default=[])
    p.add_argument("--allow-simulated", action="store_true",
                   help="write a threshold from a prediction over a SIMULATED bundle (a demo, never production)")
    p.add_argument("inputs", nargs="+", type=Path, help="bench predict --json output, one per --profile")
    args = p.parse_args(argv)
    specs = args.spec or ["eagle3"]
    if len(specs) == 1:
        specs = specs * len(args.profile)
    if not (len(args.profile) == len(specs) == len(args.inputs)):
        p.error("give one --profile (and --spec, or one --spec for all) per bench predict output")
    entries = []
    for profile, spec, path in zip(args.profile, specs, args.inputs, strict=True):
        for what, name in (("--profile", profile), ("--spec", spec)):
            if not NAME.match(name):
                print(f"breakeven.py: {what} {name!r} is not a profile or spec name", file=sys.stderr)
                return 2
        try:
            result = json.loads(path.read_text())
            if not isinstance(result, dict):
                raise Bad("not a bench predict --json object")
            source = f"{profile}/{spec} from {path.name}"
            if result.get("simulated"):
                if not args.allow_simulated:
                    raise Bad("its bundle is SIMULATED (the stand-in server): its break-even is no production "
                              "threshold; measure on the host, or pass --allow-simulated for a demo")
                source = f"SIMULATED (a demo, not a production threshold): {source}"
            entries.append((profile, spec, breakeven(result, args.scenario), source))
        except (OSError, ValueError, Bad) as e:
            print(f"breakeven.py: {path}: {e}", file=sys.stderr)
            return 2
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(render(entries))
    os.replace(tmp, args.out)
    for profile, spec, value, _ in entries:
        print(f"kit:spec_breakeven_accept_length{{profile={profile!r}, spec={spec!r}}} = {value}")
    print(f"wrote {args.out}: reload Prometheus (make monitor, or POST /-/reload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
