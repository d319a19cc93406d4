"""`--prompts FILE` and `--temperature T` of bench run and bench tune: the file's checks (exit 2 naming the file,
the line and the fix), `--num-prompts` against it, the settings and the tune's digest, and the timed requests
sampled at T while the correctness pass stays greedy (the request bodies the stand-in receives)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from bench.client.server_client import GREEDY, ServerClient
from bench.client.workload import FILE_PREFIX, build_workload, choose_prompts, prompts_file
from bench.run.cell import new_cell
from bench.run.cli import RunArgs
from bench.run.measure import CellMeasurer
from bench.run.settings import RunSettings
from bench.tune.cli import TuneArgs
from launcher.errors import UserError
from testsupport.net import free_port
from testsupport.standin.engine import Engine
from testsupport.standin.server import build_app
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import load_settings

TUNE = ["--profiles", "stable", "--url", "http://127.0.0.1:1", "--control", "http://127.0.0.1:2"]


def _file(tmp_path: Path, lines: list[str], name: str = "p.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f


def _prompts(tmp_path: Path, n: int, name: str = "p.jsonl") -> Path:
    return _file(tmp_path, [json.dumps({"id": f"q{i}", "text": f"question {i}"}) for i in range(n)], name)


# ----- the file --------------------------------------------------------------------------------
def test_text_and_messages_lines_with_optional_ids(tmp_path):
    f = _file(tmp_path, ['{"id": "a", "text": "hello"}', "",
                         '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}',
                         '{"text": "third", "task": "code"}'])
    got = prompts_file(f)
    assert [p.id for p in got.prompts] == ["a", "line-3", "line-4"]
    assert got.prompts[0].messages == (("user", "hello"),)
    assert got.prompts[1].messages == (("system", "be brief"), ("user", "hi"))
    assert got.prompts[2].task == "code" and len(got.sha256) == 64
    assert got.workload == FILE_PREFIX + str(f.resolve())
    assert [p.id for p in build_workload(got.workload, 2)] == ["a", "line-3"]


@pytest.mark.parametrize(("lines", "words"), [
    (['{"text": "a"}', "{not json"], r"p.jsonl:2: not valid JSON .*one JSON object per line"),
    (['{"id": "a"}'], r'p.jsonl:1: no prompt: give "text"'),
    (['{"id": "a", "text": ""}'], r'p.jsonl:1: key "text" must be a non-empty string'),
    (['{"id": "a", "text": "x"}', '{"id": "b", "text": "y"}', '{"id": "a", "text": "z"}'],
     r"p.jsonl:3: duplicate id 'a' \(first on line 1\); give every prompt its own id"),
    (['{"id": "a", "text": "x", "messages": []}'], r'p.jsonl:1: give "text" or "messages", not both'),
    (['["a list"]'], r"p.jsonl:1: not a JSON object"),
    (['{"id": 3, "text": "x"}'], r'p.jsonl:1: key "id" must be a non-empty string'),
    (["", "  "], r"p.jsonl: no prompts found; write one prompt per line"),
])
def test_bad_file_names_the_file_the_line_and_the_fix(tmp_path, lines, words):
    with pytest.raises(UserError, match=words):
        prompts_file(_file(tmp_path, lines))


def test_missing_file_names_the_flag(tmp_path):
    with pytest.raises(UserError, match=r"--prompts .*nope.jsonl: no such file; give a JSONL file"):
        prompts_file(tmp_path / "nope.jsonl")


def test_num_prompts_takes_the_first_n_or_all_when_unset(tmp_path):
    f = str(_prompts(tmp_path, 5))
    workload, n, sha = choose_prompts(f, None, 16, "chat")
    assert workload.startswith(FILE_PREFIX) and n == 5 and sha
    assert choose_prompts(f, 3, 16, "chat")[1] == 3
    assert choose_prompts(None, None, 16, "random") == ("random", 16, None)
    with pytest.raises(UserError, match=r"--num-prompts 6: .* has 5 prompt\(s\); give --num-prompts 5 or fewer"):
        choose_prompts(f, 6, 16, "chat")
    with pytest.raises(UserError, match="--workload random"):
        choose_prompts(f, None, 16, "random")


# ----- the commands ------------------------------------------------------------------------------
def test_bench_run_records_the_file_and_the_temperature(tmp_path):
    f = _prompts(tmp_path, 4)
    argv = ["--prompts", str(f), "--temperature", "0.7", "--no-switch", "--url", "http://127.0.0.1:1"]
    s = RunArgs.parse(argv).settings(argv)
    assert (s.num_prompts, s.temperature, s.prompts) == (4, 0.7, str(f))
    assert s.workload == FILE_PREFIX + str(f.resolve()) and s.prompts_sha256 == prompts_file(f).sha256
    assert s.to_json()["temperature"] == 0.7 and s.to_json()["prompts_sha256"] == s.prompts_sha256
    plain = RunArgs.parse([]).settings([])
    assert (plain.num_prompts, plain.temperature, plain.workload, plain.prompts_sha256) == (16, 0.0, "chat", None)


@pytest.mark.parametrize("value", ["-0.1", "nan", "inf"])
def test_bad_temperature_exits_2_before_anything_runs(value, capsys):
    from bench.run.cli import main as run_main
    from bench.tune.cli import main as tune_main

    assert run_main(["--temperature", value, "--no-switch"]) == 2
    assert "--temperature" in capsys.readouterr().err
    assert tune_main([*TUNE, "--temperature", value]) == 2
    assert "give a finite number 0 or more" in capsys.readouterr().err


def test_bad_prompts_file_exits_2_in_both_commands(tmp_path, capsys, monkeypatch):
    from bench.run.cli import main as run_main
    from bench.tune.cli import main as tune_main

    monkeypatch.setenv("KIT_CONTROL_TOKEN", "t")
    bad = _file(tmp_path, ['{"text": "a"}', '{"text": '])
    assert run_main(["--prompts", str(bad), "--no-switch"]) == 2
    assert "p.jsonl:2: not valid JSON" in capsys.readouterr().err
    assert tune_main([*TUNE, "--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def test_tune_digest_changes_with_the_file_content_and_the_temperature(tmp_path):
    a, b = _prompts(tmp_path, 4, "a.jsonl"), _prompts(tmp_path, 5, "b.jsonl")
    same_as_a = tmp_path / "copy" / "a.jsonl"
    same_as_a.parent.mkdir()
    same_as_a.write_bytes(a.read_bytes())

    def measuring(*extra: str) -> dict:
        argv = [*TUNE, *extra]
        return TuneArgs.parse(argv).settings(argv).measuring()

    plain = measuring()
    assert "prompts_sha256" not in plain and "temperature" not in plain  # a tune without them keeps its digest
    with_a = measuring("--prompts", str(a), "--num-prompts", "4")
    assert with_a["prompts_sha256"] == prompts_file(a).sha256 and with_a["workload"] == "file"
    assert with_a == measuring("--prompts", str(same_as_a), "--num-prompts", "4")  # the content, not the path
    assert with_a != measuring("--prompts", str(b), "--num-prompts", "4")
    assert measuring("--temperature", "0.5")["temperature"] == 0.5
    s = TuneArgs.parse([*TUNE, "--prompts", str(b), "--temperature", "0.5"]).settings([])
    rs = s.run_settings()
    assert (s.num_prompts, rs.num_prompts, rs.temperature, rs.workload, rs.prompts_sha256) == (
        5, 5, 0.5, s.workload, prompts_file(b).sha256)
    assert TuneArgs.parse(TUNE).settings([]).num_prompts == 8


# ----- temperature on the wire ---------------------------------------------------------------------
def test_payloads_sample_timed_requests_at_t_and_logprob_requests_greedy():
    prompt = build_workload("chat", 1)[0]
    for api in ("generate", "chat"):
        client = ServerClient("http://127.0.0.1:1", api=api, temperature=0.9)
        _, timed = client._payload(prompt, client.temperature)
        _, gate = client._logprob_payload(prompt, 5)
        t = timed["sampling_params"]["temperature"] if api == "generate" else timed["temperature"]
        g = gate["sampling_params"]["temperature"] if api == "generate" else gate["temperature"]
        assert (t, g) == (0.9, GREEDY) and GREEDY == 0.0


def test_the_standin_gets_t_for_timed_requests_and_0_for_the_correctness_pass(tmp_path, monkeypatch):
    """A whole cell through CellMeasurer.fill against the in-process stand-in: the request bodies it receives."""
    from testsupport.standin import server as standin_server

    bodies: list[dict] = []
    read_json = standin_server._read_json

    async def capture(request: web.Request) -> dict:
        body = await read_json(request)
        bodies.append(body)
        return body

    monkeypatch.setattr(standin_server, "_read_json", capture)

    async def go() -> list:
        engine = Engine(load_settings({"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_DECODE_MS": "1"}),
                        parse_server_argv(["--model-path", "m"]), environ={})
        app = build_app(engine)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        settings = RunSettings(url=f"http://127.0.0.1:{port}", out=str(tmp_path), no_switch=True, control=None,
                               num_prompts=2, max_tokens=8, warmup=1, repeats=1, temperature=0.7)
        prompts = build_workload("chat", 2)
        passes: list = []
        try:
            async with ServerClient(settings.url, max_tokens=8) as server:
                m = CellMeasurer(settings, server, None, prompts, lambda _m: None)
                cell = new_cell(profile="p", spec="off", settings=settings, num_prompts=2)
                await m.fill(cell, repeats=1, on_rows=lambda _r: None, on_plan=lambda _p: None,
                             on_logprobs=passes.append)
                assert cell.invalid_reason is None, cell.invalid_reason
        finally:
            await runner.cleanup()
        return passes

    passes = asyncio.run(go())
    assert passes and len(passes[0]) == 2
    timed = [b for b in bodies if b.get("stream")]
    gate = [b for b in bodies if not b.get("stream")]
    assert len(timed) == 3 and len(gate) == 2  # one warm-up and two timed; one greedy reply per prompt
    assert {b["sampling_params"]["temperature"] for b in timed} == {0.7}
    assert {b["sampling_params"]["temperature"] for b in gate} == {0.0}
    assert all(b.get("return_logprob") for b in gate)


def test_an_edited_file_is_read_again(tmp_path):
    f = _prompts(tmp_path, 2)
    first = prompts_file(f)
    assert prompts_file(f) is first  # the settings and the workload share one read
    f.write_text('{"id": "only", "text": "changed, and longer than before"}\n', encoding="utf-8")
    again = prompts_file(f)
    assert [p.id for p in again.prompts] == ["only"] and again.sha256 != first.sha256
