"""`bench sla`: for each profile x spec cell, the highest request rate whose pooled p99 TTFT and p99 TPOT meet the
targets (--ttft-p99-ms, --tpot-p99-ms), found by a bracketing search of open-loop levels (bench/sla/search.py).

Each cell is measured and gated as `bench run` measures and gates it (bench/sla/matrix.py extends its matrix): the
measuring hold, the switch, the warm-up, the correctness pass; production ends where bench/run/landing.py says
(back on the plan found running), also after a failure or Ctrl-C. The bundle holds every probe as a `by_rate` level
and sla.json (bench/sla/record.py); the table (bench/sla/table.py) goes to stdout, `--json` prints it as JSON.

Exit codes: 0 done, 1 runtime failure, 2 bad input (naming the flag, before anything was switched), 3 the plan
found running FAILed the gate (production went to baseline instead), 130 interrupted (partial bundle, sla.json
with the cells closed so far).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from rich.console import Console

from bench.args import Command, Given, stop_on_interrupt
from bench.control.hold import MeasureHold, holder_of
from bench.control.production import PlanRef
from bench.run.landing import Landing
from bench.sla import table
from bench.sla.matrix import SlaRun
from bench.sla.settings import SlaSettings, settings_from
from launcher import settings
from launcher.errors import KitError, RuntimeFailure, UserError, run_cli
from launcher.runtime.api.control_client import SyncControlClient

SlaArgs = Command(SlaSettings, "bench sla", (
    "The highest request rate each profile x spec cell holds within p99 TTFT and p99 TPOT targets: a bracketing "
    "search of open-loop levels (double or halve, then bisect to --precision), each cell gated for correctness "
    "as `bench run` gates it (docs/sla.md)."), settings_from)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = SlaArgs.parse(argv)
    stop_on_interrupt(sigterm=True)  # Ctrl-C and SIGTERM write the partial bundle and put production back
    return run_cli(lambda: sla_main(args, argv=argv, console=Console(stderr=True)))


def sla_main(args: Given, *, argv: list[str], console: Console) -> int:
    s: SlaSettings = args.settings(argv)
    token = settings.KIT_CONTROL_TOKEN.get()
    if s.switching and not token:
        raise UserError("switching needs the control token: set KIT_CONTROL_TOKEN (or use --no-switch)")
    run = SlaRun(s, console)
    rc = measure(run, token, console)
    if run.record is not None and rc in (0, 3):
        bundle = str(run.run_dir) if run.run_dir.is_dir() else None
        if s.json:
            print(table.as_json(run.record, bundle))
        else:
            table.render(run.record)
    return rc


def measure(run: SlaRun, token: str | None, console: Console) -> int:
    """The search over every cell into one bundle; when it switches, under the measuring hold and with production
    put where bench/run/landing.py says, also after a failure or Ctrl-C."""
    s = run.s
    if not s.switching:
        return _measure(run, token)
    assert s.control is not None
    client = SyncControlClient(s.control, token, s.connect_timeout, url_from="--control / KIT_CONTROL_URL")

    def say(text: str, style: str | None = None) -> None:
        console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)

    with MeasureHold(client, holder_of("bench sla", Path(s.out)), say) as run.hold:
        running = client.running_plan()
        start = PlanRef.from_json(running.to_json()) if running is not None else None
        if start is None or not start.name:
            raise RuntimeFailure(f"the control API at {s.control} reports no running plan to go back to "
                                 "(nothing was switched); start the server first (`launcher up`)")
        landing = Landing(s, token, start, say)
        try:
            rc = _measure(run, token)
        except BaseException:
            if run.switched:
                landing.land(run.cells, whole=False)
            raise
        landed = landing.land(run.cells, whole=rc == 0) if run.switched else 0
        return 1 if landed == 1 else (rc or landed)


def _measure(run: SlaRun, token: str | None) -> int:
    """The matrix into its bundle; on Ctrl-C or a failure the partial bundle says `complete: false`."""
    try:
        path = asyncio.run(run.run(token))
    except KeyboardInterrupt:
        partial = _partial(run, interrupted=True)
        print("interrupted" + (f"; partial bundle (complete: false) in {partial}" if partial else ""), file=sys.stderr)
        return 130
    except KitError as exc:
        if (partial := _partial(run, stopped_by=str(exc)[:300])) is not None:
            print(f"partial bundle (complete: false) in {partial}", file=sys.stderr)
        raise
    except Exception as exc:
        _partial(run, stopped_by=f"{type(exc).__name__}: {exc}"[:300])
        raise
    label = "SIMULATED " if run.simulated else ""
    print(f"{label}bench bundle: {path}\n{label}SLA search: {Path(path) / 'sla.json'}", file=sys.stderr)
    return 0


def _partial(run: SlaRun, interrupted: bool = False, stopped_by: str | None = None) -> Path | None:
    """The partial bundle, whole and marked `complete: false`; when even that fails, no bundle at all."""
    try:
        return run.finish(complete=False, interrupted=interrupted, stopped_by=stopped_by)
    except Exception as exc:
        run.discard()
        print(f"error: the partial bundle could not be written ({type(exc).__name__}: {exc}); removed it",
              file=sys.stderr)
        return None


if __name__ == "__main__":
    raise SystemExit(main())
