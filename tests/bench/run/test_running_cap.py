"""The server's running cap (SGLang's max_running_requests): read from /server_info, a concurrency level above it
refused, recorded on the cell, and the SIMULATED stand-in running at most that many requests at once."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from helpers_bench import cell as cell_file

from bench.bundle.schema import Cell
from bench.client.server_answers import running_cap
from bench.client.server_client import ServerClient
from bench.client.workload import build_workload
from bench.run.cell import close_cell, new_cell
from bench.run.measure import CellMeasurer, over_cap
from bench.run.settings import RunSettings
from launcher.errors import UserError
from testsupport.net import free_port
from testsupport.standin.engine import Engine
from testsupport.standin.server import build_app
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import load_settings

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4"]


@pytest.mark.parametrize(("info", "cap"), [
    # the scheduler's value per DP rank wins over the resolved argument (the KV cache may hold it lower)
    ({"max_running_requests": 48, "internal_states": [{"effective_max_running_requests_per_dp": 40}]}, 40),
    ({"max_running_requests": 48, "internal_states": [{"effective_max_running_requests_per_dp": 24}] * 2}, 48),
    ({"max_running_requests": 48, "internal_states": [{}]}, 48),
    ({"max_running_requests": None, "internal_states": [{"effective_max_running_requests_per_dp": 2048}]}, 2048),
    ({"max_running_requests": None}, None),
    ({"max_running_requests": True, "internal_states": "x"}, None),
    ({}, None),
])
def test_running_cap_reads_the_schedulers_limit_then_the_resolved_argument(info, cap):
    assert running_cap(info) == cap


def test_over_cap_names_the_cap_and_the_flag():
    assert over_cap([1, 16, 48], 48, "fused+eagle3") is None
    assert over_cap([1, 64], None, "x") is None
    why = over_cap([1, 64, 96], 48, "fused+eagle3")
    assert why is not None
    assert "--concurrency 64,96" in why and "max_running_requests 48" in why
    assert "--max-running-requests 96" in why


def test_a_bundle_without_the_cap_still_loads_and_a_new_one_keeps_it():
    old = Cell.model_validate(cell_file("fused", "eagle3", 80, 1))
    assert old.max_running_requests is None and old.ran_at_once(64) is None
    new = Cell.model_validate({**cell_file("fused", "eagle3", 80, 1), "max_running_requests": 48})
    assert new.ran_at_once(64) == 48 and new.ran_at_once(16) == 16
    assert new.to_json()["max_running_requests"] == 48


async def _standin(argv: list[str], env: dict[str, str]) -> tuple[web.AppRunner, Engine, str]:
    engine = Engine(load_settings({"STANDIN_STARTUP_DELAY_S": "0", **env}),
                    parse_server_argv(["--model-path", "m", *argv]), environ={})
    runner = web.AppRunner(build_app(engine), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, engine, f"http://127.0.0.1:{port}"


def test_the_standin_reports_the_cap_as_sglang_does_and_queues_above_it():
    async def go() -> None:
        for argv, top, cap in ((EAGLE3, 48, 48), ([], None, 2048),
                               ([*EAGLE3, "--max-running-requests", "3"], 3, 3)):
            runner, engine, url = await _standin(argv, {"STANDIN_TTFT_MS": "1", "STANDIN_VERIFY_MS": "5",
                                                        "STANDIN_DECODE_MS": "5"})
            try:
                async with ServerClient(url, max_tokens=8) as server:
                    info = await server.server_info()
                    assert info["max_running_requests"] == top
                    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == cap
                    server.configure_from_server_info(info)
                    assert server.running_cap == cap
                    if cap != 3:
                        continue
                    peak = 0

                    async def watch(stats) -> None:
                        nonlocal peak
                        while True:
                            peak = max(peak, stats.running)
                            await asyncio.sleep(0.001)

                    watcher = asyncio.create_task(watch(engine.stats))
                    records, _ = await server.run(build_workload("chat", 8), 8)
                    watcher.cancel()
                    assert all(r.ok for r in records)
                    assert peak == 3  # eight sent at once, three ran, the rest waited (their wait is in their TTFT)
                    ttfts = sorted(r.ttft_s for r in records if r.ttft_s is not None)
                    assert ttfts[-1] > 2 * ttfts[0]
            finally:
                await runner.cleanup()

    asyncio.run(go())


def test_concurrency_above_the_cap_is_refused_before_anything_is_measured(tmp_path):
    async def go() -> None:
        runner, _, url = await _standin(EAGLE3, {"STANDIN_DECODE_MS": "1", "STANDIN_VERIFY_MS": "1"})
        settings = RunSettings(url=url, out=str(tmp_path), no_switch=True, control=None, num_prompts=2,
                               max_tokens=4, warmup=1, repeats=1, concurrency=[1, 64])
        try:
            async with ServerClient(url, max_tokens=4) as server:
                m = CellMeasurer(settings, server, None, build_workload("chat", 2), lambda _m: None)
                cell = new_cell(profile="p", spec="eagle3", settings=settings, num_prompts=2)
                with pytest.raises(UserError, match=r"--concurrency 64 is above the server's max_running_requests 48"):
                    await m.fill(cell, repeats=1, on_rows=lambda _r: None, on_plan=lambda _p: None)
                assert cell.per_repeat == [] and cell.max_running_requests == 48

                ok = RunSettings(url=url, out=str(tmp_path), no_switch=True, control=None, num_prompts=2,
                                 max_tokens=4, warmup=0, repeats=1, concurrency=[1, 48])
                m = CellMeasurer(ok, server, None, build_workload("chat", 2), lambda _m: None)
                cell = new_cell(profile="p", spec="eagle3", settings=ok, num_prompts=2)
                await m.fill(cell, repeats=1, on_rows=lambda _r: None, on_plan=lambda _p: None)
                record = close_cell(cell, concurrency=[1, 48], repeats=1)
                assert record.valid and record.max_running_requests == 48
        finally:
            await runner.cleanup()

    asyncio.run(go())


@pytest.mark.stack
def test_bench_run_exits_2_naming_the_cap_and_the_flag(tmp_path, capsys):
    """`bench run --no-switch --concurrency 64` against an EAGLE-3 stand-in that reports 48: exit 2."""
    from bench.run.cli import main as run_main

    async def serve(stop: asyncio.Event, ready: asyncio.Future) -> None:
        runner, _, url = await _standin(EAGLE3, {"STANDIN_DECODE_MS": "1", "STANDIN_VERIFY_MS": "1"})
        ready.set_result(url)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    import threading

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready: asyncio.Future = loop.create_future()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(stop, ready),), daemon=True)
    thread.start()
    try:
        url = _result(ready)
        rc = run_main(["--url", url, "--no-switch", "--concurrency", "1,64", "--num-prompts", "2", "--max-tokens",
                       "4", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path)])
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=20)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "max_running_requests 48" in err and "--max-running-requests 64" in err


def _result(fut: asyncio.Future) -> str:
    import time

    deadline = time.monotonic() + 20
    while not fut.done():
        assert time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.01)
    return fut.result()
