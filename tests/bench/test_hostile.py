"""The bench against a hostile server (testsupport/hostile.py on 127.0.0.1): it cannot push `bench run`
outside `--out`, past its memory caps or its time limits, and damaged bundles never give a traceback.

Caps are set small through ServerClient's parameters, so no test sends more than a few MB.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web
from helpers_bench import cell as make_cell
from helpers_bench import manifest as make_manifest

from bench.bundle import store as bundle
from bench.bundle.schema import Cell
from bench.client.server_client import ServerClient, token_limit
from bench.client.workload import build_workload
from bench.report import compare
from bench.report import render as report
from bench.run import selection
from launcher.errors import RuntimeFailure, UserError
from launcher.profiles.listing import ProfileRow
from testsupport.hostile import DONE, HostileServer, forever, generate_events, repeat, sse, stream
from testsupport.net import free_port

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "NCCL_", "SGLANG_"))}
    env["PYTHONPATH"] = str(REPO)
    env["KIT_CONTROL_PORT"] = str(free_port())  # no control API answers there
    return env


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.run.cli", *args], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def one_request(url: str, api: str = "generate", max_tokens: int = 8, **client: object):
    """One request of the real client against `url`; returns its RequestRecord and the seconds it took."""

    async def go():
        async with ServerClient(url, api=api, max_tokens=max_tokens, **client) as c:
            t = time.monotonic()
            rec = await c.request(build_workload("chat", 1)[0], time.perf_counter())
            return rec, time.monotonic() - t

    return asyncio.run(go())


def generate(chunks_of):
    """A /generate route that streams `chunks_of(request)`."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, chunks_of(request))

    return handler


# ----- 1: names from a server never become paths ---------------------------------------------------
@pytest.mark.stack
def test_a_server_spec_name_that_is_a_path_writes_nothing_outside_out(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    info = {"speculative_algorithm": "../" * 5 + "escaped", "version": "hostile"}
    with HostileServer(server_info=info, generate=generate(lambda _r: generate_events(4))) as s:
        r = bench("--url", s.url, "--no-switch", "--repeats", "1", "--num-prompts", "1", "--max-tokens", "4",
                  "--warmup", "0", "--out", str(out))
    assert r.returncode == 1, r.stderr
    assert "speculative_algorithm" in r.stderr and "nothing was written" in r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.rglob("*escaped*"))
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.stack
def test_a_control_api_profile_name_that_is_a_path_is_refused(tmp_path):
    with HostileServer(status={"profile": "../../evil", "spec": "off"},
                       generate=generate(lambda _r: generate_events(4))) as s:
        r = bench("--url", s.url, "--control", s.url, "--no-switch", "--out", str(tmp_path / "out"))
    assert r.returncode == 1 and "/status reports a profile name" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.rglob("*evil*"))


@pytest.mark.stack
def test_names_from_the_user_and_from_server_lists_follow_the_name_rule(tmp_path):
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--profiles", "../x", "--out", str(tmp_path))
    assert r.returncode == 2 and "--profiles: profile name '../x' is not valid" in r.stderr
    with pytest.raises(RuntimeFailure, match="cannot use"):
        selection.resolve_profiles("all", [ProfileRow(name=n, description="", status="stable", path="")
                                            for n in ("ok", "../../x")], "the control API")
    with pytest.raises(RuntimeFailure, match="cannot use"):
        selection.no_switch_label(None, None, None, {"speculative_algorithm": "A/B"})


def test_bundle_files_stay_in_the_bundle_folder_links_included(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (run_dir / "p__off.json").symlink_to(outside)
    with pytest.raises(RuntimeFailure, match="outside the bundle folder"):
        bundle.write_cell(run_dir, Cell(profile="p", spec="off"))
    with pytest.raises(RuntimeFailure, match="cannot name a file"):
        bundle.append_requests(run_dir, "p", "../../x", [{}])
    assert outside.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["outside.json", "run"]


# ----- 2: memory and time are bounded ----------------------------------------------------------------
def test_an_error_body_is_read_no_further_than_its_cap():
    async def handler(request):
        return await stream(request, repeat(b"E" * 65536, 20 * MiB), status=500, content_type="text/plain")

    with HostileServer(generate=handler) as s:
        rec, took = one_request(s.url, error_body_cap=64 * 1024)
    assert not rec.ok and rec.error.startswith("HTTP 500: ")
    assert "body cut at the 64 KiB error body cap" in rec.error and len(rec.error) < 500
    assert took < 10


def test_bytes_after_done_are_not_read_whole():
    sent: list[int] = []
    total = 256 * MiB

    async def after_done():
        for event in generate_events(3):
            yield event
        async for piece in repeat(b"x" * MiB, total):
            sent.append(len(piece))
            yield piece

    with HostileServer(generate=generate(lambda _r: after_done())) as s:
        rec, took = one_request(s.url)
        deadline = time.monotonic() + 30
        while sum(sent) < total and time.monotonic() < deadline and not s.idle():
            time.sleep(0.05)
    assert rec.ok and rec.completion_tokens == 3, rec.error
    assert sum(sent) < total / 4  # the client hung up instead of reading on
    assert took < 10


def test_a_line_longer_than_the_cap_fails_the_request_naming_the_cap():
    big = b"data: " + b"x" * (3 * MiB)  # never ends with a blank line
    with HostileServer(generate=generate(lambda _r: [big[i:i + 65536] for i in range(0, len(big), 65536)])) as s:
        rec, _ = one_request(s.url, line_cap=1 * MiB)
    assert not rec.ok and "1 MiB line cap" in rec.error


def test_a_complete_event_longer_than_the_cap_fails_too():
    text = "y" * (2 * MiB)
    events = [sse({"text": text, "meta_info": {"completion_tokens": 1, "finish_reason": None}}), DONE]
    with HostileServer(generate=generate(lambda _r: events)) as s:
        rec, _ = one_request(s.url, line_cap=1 * MiB)
    assert not rec.ok and "1 MiB" in rec.error


@pytest.mark.parametrize("api", ["generate", "chat"])
def test_a_stream_past_max_tokens_ends(api):
    def event(i: int) -> bytes:
        if api == "chat":
            return sse({"choices": [{"delta": {"content": "t"}, "finish_reason": None}]})
        return sse({"text": "t", "meta_info": {"completion_tokens": i + 1, "finish_reason": None}})

    route = {"/generate" if api == "generate" else "/v1/chat/completions":
             generate(lambda _r: forever(event, 0.001))}
    with HostileServer(route) as s:
        rec, took = one_request(s.url, api=api, max_tokens=8)
    assert not rec.ok and f"more than the {token_limit(8)} allowed" in rec.error, rec.error
    assert took < 30


def test_a_stream_that_never_ends_is_cut_at_the_request_timeout():
    same = sse({"text": "t", "meta_info": {"completion_tokens": 1, "finish_reason": None}})
    with HostileServer(generate=generate(lambda _r: forever(lambda _i: same, 0.01))) as s:
        rec, took = one_request(s.url, request_timeout=1.0)
    assert not rec.ok and "not finished after 1 s (--request-timeout)" in rec.error
    assert took < 15


@pytest.mark.stack
def test_headers_then_silence_end_at_the_read_timeout_and_the_bundle_is_whole_or_absent(tmp_path):
    async def silent(request):
        async def nothing():
            await asyncio.sleep(3600)
            yield b""

        return await stream(request, nothing())

    out = tmp_path / "out"
    with HostileServer(generate=silent) as s:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.run.cli", "--url", s.url, "--no-switch", "--repeats", "1",
             "--num-prompts", "1", "--warmup", "0", "--read-timeout", "1.5", "--out", str(out)],
            cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not (out.is_dir() and list(out.iterdir())) and time.monotonic() < deadline:
                time.sleep(0.05)
            names = [p.name for p in out.iterdir()]
            assert len(names) == 1 and names[0].startswith(".") and names[0].endswith(".partial")  # not yet named
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    [run_dir] = list(out.iterdir())
    assert not run_dir.name.startswith(".")
    cell = json.loads((run_dir / "current__off.json").read_text())
    assert cell["valid"] is False and "no data for 1.5 s (--read-timeout)" in cell["invalid_reason"]
    assert json.loads((run_dir / "manifest.json").read_text())["complete"] is True


MALFORMED_GENERATE = [
    {"text": "x", "meta_info": "oops"},
    {"text": "x", "meta_info": ["a"]},
    {"text": "x", "meta_info": {"completion_tokens": "5", "finish_reason": None}},
    {"text": "x", "meta_info": {"completion_tokens": True}},
    {"text": "x", "meta_info": {"completion_tokens": -1}},
    {"text": 5, "meta_info": {"completion_tokens": 1}},
    {"text": "x", "meta_info": {"completion_tokens": 1, "spec_verify_ct": "2", "finish_reason": "stop"}},
    {"text": "x", "meta_info": {"completion_tokens": 1, "prompt_tokens": [1]}},
    {"text": "x", "meta_info": {"completion_tokens": 1, "spec_correct_drafts_histogram": [1, "2"]}},
    {"error": ["not", "an", "object"]},
    [1, 2],
    b"[" * 100000,
    b"\xff\xfe not utf-8",
    b"{not json",
]
MALFORMED_CHAT = [
    {"choices": "x"},
    {"choices": [1]},
    {"choices": [{"delta": "x"}]},
    {"choices": [{"delta": {"content": 5}}]},
    {"choices": [], "usage": "x"},
    {"choices": [], "usage": {"completion_tokens": "3"}},
    {"choices": [], "sglext": "x"},
    {"choices": [], "sglext": {"spec_tokens_details": ["a"]}},
    {"choices": [], "sglext": {"spec_tokens_details": {"spec_correct_drafts_histogram": {"0": 1}}}},
]


@pytest.mark.parametrize(("api", "event"), [*(("generate", e) for e in MALFORMED_GENERATE),
                                            *(("chat", e) for e in MALFORMED_CHAT)])
def test_a_malformed_event_fails_the_request_never_the_bench(api, event):
    first = (sse({"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": None}}) if api == "generate"
             else sse({"choices": [{"delta": {"content": "a"}}]}))
    path = "/generate" if api == "generate" else "/v1/chat/completions"
    with HostileServer({path: generate(lambda _r: [first, sse(event), DONE])}) as s:
        rec, _ = one_request(s.url, api=api)
    assert not rec.ok and rec.error and rec.error.startswith(("bad stream", "stream broke", "server error")), rec.error


@pytest.mark.stack
def test_a_string_meta_info_gives_an_invalid_cell_in_a_whole_bundle(tmp_path):
    events = [sse({"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": None}}),
              sse({"text": "ab", "meta_info": "a string"}), DONE]
    with HostileServer(generate=generate(lambda _r: events)) as s:
        r = bench("--url", s.url, "--no-switch", "--repeats", "1", "--num-prompts", "2", "--max-tokens", "4",
                  "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    [run_dir] = list(tmp_path.iterdir())
    cell = json.loads((run_dir / "current__off.json").read_text())
    assert cell["valid"] is False and "meta_info is str, not an object" in cell["invalid_reason"]
    assert json.loads((run_dir / "manifest.json").read_text())["complete"] is True
    assert (run_dir / "summary.md").is_file() and (run_dir / "summary.csv").is_file()


# ----- the correctness pass: a malformed reply is no evidence, or an invalid cell; never a traceback ----------
GOOD_ROWS = '[[-0.1, 7, null], [-0.2, 8, null], [-0.3, 9, null], [-0.4, 10, null]]'


def logprob_reply(rows: str = GOOD_ROWS, tops: str = "null", extra: str = "") -> bytes:
    """A /generate reply with log-probabilities, as raw JSON text (NaN and huge integers included)."""
    return (f'{{"text": "ok ok ok ok ", "meta_info": {{"completion_tokens": 4, "output_token_logprobs": {rows}, '
            f'"output_top_logprobs": {tops}{extra}}}}}').encode()


def rows_with(first: str) -> str:
    return GOOD_ROWS.replace("-0.1", first, 1)


HOSTILE_REPLIES = {  # the raw reply, and the reason the bundle gives for the cell
    "tops 5,5,5,5": (logprob_reply(tops="[5, 5, 5, 5]"), "meta_info.output_top_logprobs[0] is 5, not a list"),
    "a log-probability above 0": (logprob_reply(rows_with("0.5")),
                                  "meta_info.output_token_logprobs[0][0] is 0.5: a log-probability is at most 0"),
    "a 400-digit log-probability": (logprob_reply(rows_with("1" * 400)),
                                    "meta_info.output_token_logprobs[0][0] is '111111111111111111111111...'"),
    "NaN": (logprob_reply(rows_with("NaN")), "meta_info.output_token_logprobs[0][0] is 'NaN', not a log-probability"),
}
INVALID_REPLIES = {  # replies no JSON the bench keeps: the cell is invalid with this reason
    "nested 100k deep": (b'{"meta_info": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "(nested too deep)"),
    "nested 40 deep": (logprob_reply(extra=', "x": ' + "[" * 40 + "]" * 40), "(nested more than 32 levels deep)"),
}


def logprob_server(reply: bytes) -> HostileServer:
    """Timed requests stream well; the correctness pass (not streamed) gets `reply`."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if (await request.json()).get("stream"):
            return await stream(request, generate_events(4))
        return web.Response(body=reply, content_type="application/json")

    return HostileServer(generate=handler)


def run_against(reply: bytes, out: Path) -> tuple[subprocess.CompletedProcess, Path, dict, dict]:
    """`bench run --no-switch` as baseline (so its correctness pass is judged, against itself)."""
    with logprob_server(reply) as s:
        r = bench("--url", s.url, "--no-switch", "--profiles", "baseline", "--repeats", "1", "--num-prompts", "1",
                  "--max-tokens", "4", "--warmup", "0", "--out", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    [run_dir] = list(out.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["interrupted"] is False
    return r, run_dir, manifest, json.loads((run_dir / "baseline__off.json").read_text())


@pytest.mark.stack
@pytest.mark.parametrize("case", sorted(HOSTILE_REPLIES))
def test_a_malformed_logprob_reply_is_not_enough_evidence_naming_the_field(case, tmp_path, capsys):
    from bench.gate import cli as gate

    reply, reason = HOSTILE_REPLIES[case]
    _, run_dir, _, cell = run_against(reply, tmp_path / "out")
    assert cell["valid"] is True and cell["invalid_reason"] is None  # never "interrupted before this cell finished"
    corr = cell["correctness"]
    assert corr["status"] == "not enough evidence", corr
    assert corr["reasons"] and all(reason in r for r in corr["reasons"]), corr["reasons"]
    # judged again from the bundle: the same verdict (exit 3), the same reason
    assert gate.main(["--bundle", str(run_dir), "--json"]) == 3
    again = json.loads(capsys.readouterr().out)["cells"]["baseline+off"]
    assert again["status"] == "not enough evidence" and again["reasons"] == corr["reasons"]


@pytest.mark.stack
@pytest.mark.parametrize("case", sorted(INVALID_REPLIES))
def test_a_logprob_reply_nested_too_deep_makes_the_cell_invalid_with_its_reason(case, tmp_path):
    reply, reason = INVALID_REPLIES[case]
    _, _, _, cell = run_against(reply, tmp_path / "out")
    assert cell["valid"] is False and cell["invalid_reason"].startswith("correctness pass failed: prompt ")
    assert cell["invalid_reason"].endswith(reason), cell["invalid_reason"]


@pytest.mark.stack
def test_an_error_reading_a_reply_makes_the_cell_invalid_never_an_interrupted_partial_bundle(tmp_path, monkeypatch):
    """Reading a reply is meant never to raise; if it ever does, the cell is invalid with the reason and the bundle
    is whole (in process, so that reading can be broken on purpose)."""
    from rich.console import Console

    from bench.client import reply as replies
    from bench.run import cli

    for k in [k for k in os.environ if k.startswith(("KIT_", "NCCL_", "SGLANG_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("KIT_CONTROL_PORT", str(free_port()))

    def defect(body, api):
        raise TypeError("a defect")

    monkeypatch.setattr(replies, "read", defect)
    out = tmp_path / "out"
    with logprob_server(logprob_reply()) as s:
        argv = ["--url", s.url, "--no-switch", "--profiles", "baseline", "--repeats", "1", "--num-prompts", "1",
                "--max-tokens", "4", "--warmup", "0", "--out", str(out)]
        assert cli.run_main(cli.RunArgs.parse(argv), argv=argv, console=Console(stderr=True)) == 0
    [run_dir] = list(out.iterdir())
    cell = json.loads((run_dir / "baseline__off.json").read_text())
    assert cell["invalid_reason"] == "correctness pass failed: a reply the bench could not read (TypeError: a defect)"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["interrupted"] is False


DAMAGE_LOGPROBS = [  # a change to the first line of a cell's logprobs.jsonl, and what the error says
    (lambda line: line[: len(line) // 2], "baseline__off.logprobs.jsonl:1: not valid JSON"),
    (lambda line: line.replace('"concurrency": 1', '"concurrency": NaN'), "NaN is not a number JSON allows"),
    (lambda line: '{"prompt_id": "x", "logprobs": [[7, 5.0, []]]}', "baseline__off.logprobs.jsonl line 1: not a "
                                                                    "correctness-pass row"),
]


@pytest.mark.stack
def test_bench_gate_on_a_damaged_logprobs_file_exits_2_naming_the_file_and_line(tmp_path, capsys):
    import shutil

    from bench.gate import cli as gate

    _, run_dir, _, _ = run_against(logprob_reply(), tmp_path / "out")
    for n, (damage, expected) in enumerate(DAMAGE_LOGPROBS):
        copy = shutil.copytree(run_dir, tmp_path / f"damaged{n}")
        path = copy / "baseline__off.logprobs.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([damage(lines[0]), *lines[1:]]) + "\n")
        assert gate.main(["--bundle", str(copy)]) == 2, expected
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, err


# ----- damaged bundles: exit 2 naming the file ----------------------------------------------------------
def write_bundle(d: Path, cells: list[dict], manifest: dict | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(manifest or make_manifest()))
    for c in cells:
        (d / f"{c['profile']}__{c['spec']}.json").write_text(json.dumps(c))
    return d


DAMAGE = {
    "manifest is a list": ("manifest.json", b"[]", "a JSON object was expected"),
    "manifest not UTF-8": ("manifest.json", b'{"run_id": "\xff"}', "not UTF-8"),
    "string number": ("baseline__off.json", None, "by_concurrency.1.output_throughput_mean"),
    "1e999": ("baseline__off.json", b'{"profile": "baseline", "spec": "off", "x": 1e999}', "out of range"),
    "NaN": ("baseline__off.json", b'{"profile": "baseline", "spec": "off", "x": NaN}', "NaN"),
    "path as profile": ("baseline__off.json", b'{"profile": "../x", "spec": "off"}', "profile"),
    "string concurrency": ("manifest.json", json.dumps({**make_manifest(), "settings": {"concurrency": ["1"]}}).encode(),
                           "settings.concurrency.0"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_report_and_compare_on_a_damaged_bundle_exit_2_naming_the_file(damage, tmp_path, capsys):
    name, content, expected = DAMAGE[damage]
    good = write_bundle(tmp_path / "good", [make_cell("baseline", "off", 80.0, 1.0)])
    bad = write_bundle(tmp_path / "bad", [make_cell("baseline", "off", 80.0, 1.0)])
    if content is None:
        c = make_cell("baseline", "off", 80.0, 1.0)
        c["by_concurrency"]["1"]["output_throughput_mean"] = "80.0"
        content = json.dumps(c).encode()
    (bad / name).write_bytes(content)
    for command in (lambda: report.main([str(bad)]), lambda: compare.main([str(good), str(bad)]),
                    lambda: compare.main([str(bad), str(good), "--json"])):
        rc = command()
        err = capsys.readouterr().err
        assert rc == 2, err
        assert str(bad / name) in err and expected in err and "Traceback" not in err


def test_a_damaged_requests_file_exits_2_naming_it(tmp_path, capsys):
    d = write_bundle(tmp_path / "b", [make_cell("baseline", "off", 80.0, 1.0)])
    (d / "baseline__off.requests.jsonl").write_text('{"ok": true, "concurrency": 1, "tpot_s": "0.01"}\n')
    assert report.main([str(d)]) == 2
    err = capsys.readouterr().err
    assert "baseline__off.requests.jsonl line 1" in err and "tpot_s" in err


def test_compare_json_is_valid_json_even_when_deltas_overflow(tmp_path, capsys):
    a = write_bundle(tmp_path / "a", [make_cell("baseline", "off", 1.5e308, 1e300)])
    b = write_bundle(tmp_path / "b", [make_cell("baseline", "off", -1.5e308, 1e300)])
    assert compare.main([str(a), str(b), "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(name: str) -> float:
        raise AssertionError(f"{name} in compare --json output")

    data = json.loads(out, parse_constant=refuse)
    row = next(r for r in data["rows"] if r["metric"] == "tok/s")
    assert row["delta"] is None and "out of range" in row["note"]
    json.dumps(data, allow_nan=False)


def test_bundle_load_refuses_a_path_in_a_cell_name(tmp_path):
    d = write_bundle(tmp_path / "b", [])
    (d / "x.json").write_text(json.dumps({"profile": "a/../../b", "spec": "off"}))
    with pytest.raises(UserError, match="x.json"):
        bundle.load(d)
