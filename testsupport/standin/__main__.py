"""``python -m testsupport.standin <sglang.launch_server argv>``: start the SIMULATED SGLang stand-in."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from launcher.errors import RuntimeFailure, run_cli
from testsupport.standin.activation import adaptive_disabled_line, mscclpp_failure_lines
from testsupport.standin.engine import VERSION, Engine
from testsupport.standin.server import serve
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import PROFILE_ENV, load_settings

BANNER = "SIMULATED SGLang stand-in"


def _banner(engine: Engine) -> str:
    a, s = engine.args, engine.settings
    spec = a.speculative_algorithm if a.speculative else "off"
    return (
        f"{BANNER} {VERSION} (test double, not a real engine): model={a.model_path} tp={a.tp_size} "
        f"spec={spec} profile={os.environ.get(PROFILE_ENV) or '-'} ttft_ms={s.ttft_ms} "
        f"interval_ms={engine.interval_ms} accept_length={engine.accept_length} fault={s.fault}"
    )


def _run(argv: list[str]) -> int:
    args = parse_server_argv(argv)
    engine = Engine(load_settings(), args)
    print(_banner(engine), file=sys.stderr, flush=True)
    if engine.adaptive_reason:  # the launcher resolving the server arguments (speculative_hook.py:1379-1384)
        print(adaptive_disabled_line(engine.adaptive_reason), file=sys.stderr, flush=True)
    drafts = args.speculative_num_draft_tokens
    if args.speculative and drafts and engine.accept_length > drafts:
        print(
            f"SIMULATED warning: accept_length {engine.accept_length} exceeds "
            f"--speculative-num-draft-tokens {drafts}; a real verify pass cannot accept that many",
            file=sys.stderr,
            flush=True,
        )
    if engine.settings.fault == "mscclpp_init_failure":
        print("\n".join(mscclpp_failure_lines(args)), file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # SGLang's launcher kills its own tree (engine.py:1976-1980)
    if engine.settings.fault == "crash_at_start":
        raise RuntimeFailure("SIMULATED fault crash_at_start: the server failed during start-up")
    if engine.settings.spawn_orphan:
        _spawn_orphan(engine.settings.spawn_orphan, engine.settings.ignore_sigterm)
    return asyncio.run(serve(engine))


def _spawn_orphan(pid_file: str, ignore_sigterm: bool) -> None:
    """SIMULATED: a helper in its own session, as a server's stray worker would be; only containment ends it."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)" if ignore_sigterm \
        else "import time; time.sleep(3600)"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    with open(pid_file, "a", encoding="utf-8") as fh:
        fh.write(f"{child.pid}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 2 for bad settings or argv, 1 for start-up failures, 0 after SIGTERM."""
    args = sys.argv[1:] if argv is None else argv
    try:
        return run_cli(lambda: _run(args))
    except SystemExit as exc:  # argparse reports bad argv itself, with exit 2
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    raise SystemExit(main())
