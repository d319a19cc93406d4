"""Peak memory of `bench run` against a hostile server: huge error bodies, huge SSE lines, huge tails.

Starts testsupport/hostile.py on 127.0.0.1. Its /generate answers each request with one attack, in
turn: an HTTP 500 whose body is --error-body-mb long, one SSE event --line-mb long, and a good reply
followed by --after-done-mb of bytes after [DONE]. Every body is produced as it is sent, never held.
Then it runs the real `bench run --no-switch` as a child process over those requests and prints the
child's peak RSS (getrusage of the waited-for child), the wall time, how much each attack got to
send before the bench hung up, and what the bench recorded; then the same run against a
well-behaved server, for the floor. Exit 1 when the hostile run's peak is over --target-mb.

The bundle's host fingerprint detects NCCL, which imports torch when it is installed (about 230 MB
here, whatever the server does). KIT_NCCL_VERSION (as a bench in its own container sets it) skips
that; the script sets it unless --detect-nccl is given.

    .venv/bin/python tools/bench_hostile.py [--error-body-mb 1024] [--line-mb 100] [--after-done-mb 1024]
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

from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from testsupport.hostile import HostileServer, generate_events, repeat, stream  # noqa: E402
from testsupport.net import free_port  # noqa: E402

MiB = 1024 * 1024
ATTACKS = ("error body", "long line", "after [DONE]")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--error-body-mb", type=int, default=1024)
    p.add_argument("--line-mb", type=int, default=100)
    p.add_argument("--after-done-mb", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=2, help="requests per attack (default 2)")
    p.add_argument("--target-mb", type=float, default=300.0)
    p.add_argument("--detect-nccl", action="store_true", help="leave KIT_NCCL_VERSION unset (imports torch)")
    a = p.parse_args()
    hostile = run_bench(a, hostile=True)
    floor = run_bench(a, hostile=False)
    print(f"peak RSS of bench run: {hostile:.1f} MB against the hostile server, {floor:.1f} MB against a "
          f"well-behaved one ({'meets' if hostile < a.target_mb else 'MISSES'} the {a.target_mb:.0f} MB target)")
    return 0 if hostile < a.target_mb else 1


def run_bench(a: argparse.Namespace, hostile: bool) -> float:
    """One `bench run` as a child process; prints what it recorded, returns its peak RSS in MB."""
    sizes = {"error body": a.error_body_mb * MiB, "long line": a.line_mb * MiB, "after [DONE]": a.after_done_mb * MiB}
    sent = dict.fromkeys(ATTACKS, 0)
    count = [0]

    async def attack(request: web.Request) -> web.StreamResponse:
        await request.read()
        if not hostile:
            return await stream(request, generate_events(8))
        kind = ATTACKS[count[0] % len(ATTACKS)]
        count[0] += 1

        async def counted(head: list[bytes], block: bytes, total: int):
            for h in head:
                yield h
            async for piece in repeat(block, total):
                sent[kind] += len(piece)
                yield piece

        if kind == "error body":
            return await stream(request, counted([], b"E" * MiB, sizes[kind]), status=500, content_type="text/plain")
        if kind == "long line":
            return await stream(request, counted([b"data: {\"text\": \""], b"x" * MiB, sizes[kind]))
        return await stream(request, counted(generate_events(8), b"x" * MiB, sizes[kind]))

    with tempfile.TemporaryDirectory() as out, HostileServer(generate=attack) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KIT_")}
        env.update(PYTHONPATH=str(REPO), KIT_CONTROL_PORT=str(free_port()), MPLBACKEND="Agg")
        if not a.detect_nccl:
            env["KIT_NCCL_VERSION"] = "2.27.3"  # any version: only the fingerprint records it
        n = a.rounds * len(ATTACKS)
        cmd = [sys.executable, "-m", "bench.run.cli", "--url", server.url, "--no-switch", "--repeats", "1",
               "--num-prompts", str(n), "--max-tokens", "8", "--warmup", "0", "--out", out]
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's so far
            proc.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            stderr = err.read()
        wall = time.monotonic() - t0
        peak_mb = usage.ru_maxrss / 1024  # KiB on Linux
        bundles = [d for d in Path(out).iterdir() if d.is_dir()]
        errors: list[str] = []
        if bundles:
            for line in (bundles[0] / "current__off.requests.jsonl").read_text().splitlines():
                row = json.loads(line)
                e = "ok" if row["ok"] else str(row["error"])
                errors.append(e if len(e) <= 120 else f"{e[:30]} ... {e[-80:]}")
    print(f"bench run against the {'hostile' if hostile else 'well-behaved'} server: {n} requests, "
          f"exit {proc.returncode}, wall {wall:.1f} s, peak RSS {peak_mb:.1f} MB")
    if proc.returncode != 0:
        print(stderr[-2000:], file=sys.stderr)
        raise SystemExit(1)
    if not hostile:
        return peak_mb
    for kind in ATTACKS:
        print(f"  {kind}: offered {sizes[kind] / MiB:.0f} MiB, sent before the bench hung up "
              f"{sent[kind] / MiB:.1f} MiB (all {a.rounds} requests)")
    for i, e in enumerate(errors):
        print(f"  request {i} ({ATTACKS[i % len(ATTACKS)]}): {e}")
    return peak_mb


if __name__ == "__main__":
    raise SystemExit(main())
