"""`bench tune --adaptive` on the SIMULATED stand-in, as its stack test runs it (testsupport/tune_adaptive.py): a
stack whose stand-in makes speculation pay at concurrency 1 and cost above it. Writes the console and tune.json's
`adaptive` and `decision` sections to --log (the figures docs/tune.md quotes) and exits with the tune's code.

    .venv/bin/python tools/tune_adaptive.py --log docs/evidence/tune-adaptive/standin.log
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testsupport import tune_adaptive as scenario  # noqa: E402
from testsupport.stack import standin_stack  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True, help="where the log goes")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, standin_stack(Path(tmp) / "stack", scenario.STANDIN) as stack:
        out = Path(tmp) / "out"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
        env.update(scenario.ENV, COLUMNS="200", KIT_CONTROL_TOKEN=stack.token, PYTHONPATH=str(REPO),
                   KIT_PROFILES_DIR=str(stack.profiles_dir))
        argv = scenario.tune_args(stack.server_url, stack.control_url, out)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=REPO, env=env, capture_output=True,
                              text=True, check=False)
        took = time.monotonic() - t0
        console = (proc.stdout + proc.stderr).replace(str(out), "OUT")
        runs = sorted(out.glob("*/tune.json"))
        result = json.loads(runs[-1].read_text()) if runs else {}
    names = {stack.server_url: "<url>", stack.control_url: "<control>", str(out): "OUT"}
    shown = " ".join(names.get(a, a) for a in argv)
    lines = [
        "# SIMULATED: bench tune --adaptive on the stand-in (testsupport/tune_adaptive.py, as its stack test runs it)",
        f"# stand-in settings: {json.dumps(scenario.STANDIN)}",
        f"# command: bench {shown}",
        f"# exit {proc.returncode} in {took:.0f} s on {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} "
        f"({os.cpu_count()} cores)",
        "## console", console.rstrip(),
        "## tune.json adaptive", json.dumps(result.get("adaptive"), indent=1),
        "## tune.json decision (outcome, chosen, means)",
        json.dumps({k: (result.get("decision") or {}).get(k) for k in ("outcome", "chosen", "means")}, indent=1),
    ]
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    Path(args.log).write_text("\n".join(lines) + "\n")
    print(f"SIMULATED: exit {proc.returncode} in {took:.0f} s; wrote {args.log}")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
