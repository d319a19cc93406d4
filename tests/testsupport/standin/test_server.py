"""The SIMULATED SGLang stand-in: settings, truth functions, and the real process over real HTTP."""

from __future__ import annotations

import gzip
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from launcher.errors import UserError
from testsupport.net import free_port
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import StandinSettings, load_settings
from testsupport.standin.simulation import (
    chunk_offsets_s,
    chunk_token_counts,
    effective_accept_length,
    expected_counts,
    generated_text,
)

REPO = Path(__file__).resolve().parents[3]
SPEC_ARGV = [
    "--enable-metrics",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.85",
    "--cuda-graph-max-bs",
    "8",
]
FAST = {"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TTFT_MS": "5", "STANDIN_VERIFY_MS": "4"}
FAST_DECODE = {**FAST, "STANDIN_DECODE_MS": "2"}


# ----- helpers -------------------------------------------------------------------------------
def _child_env(env: dict[str, str]) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("STANDIN_") and k != "KIT_ACTIVE_PROFILE"
    }
    base["PYTHONPATH"] = str(REPO)
    return {**base, **env}


class Standin:
    """One stand-in process on a free port, with its stderr in a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = ["--model-path", "/models/sim", "--host", "127.0.0.1", "--port", str(self.port), *argv]
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testsupport.standin", *self.argv],
                cwd=REPO,
                env=_child_env(env),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"stand-in exited {self.proc.returncode}: {self.stderr()}")
            try:
                self.client.get("/server_info")
                return
            except httpx.TransportError:
                time.sleep(0.02)
        raise AssertionError("stand-in did not start listening")

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 20
        while self.client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "stand-in never became healthy"
            time.sleep(0.02)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def standin(tmp: Path, argv: list[str], env: dict[str, str], wait: str = "healthy") -> Iterator[Standin]:
    server = Standin(argv, env, tmp / f"standin-{time.monotonic_ns()}.log")
    try:
        if wait in ("listening", "healthy"):
            server.wait_listening()
        if wait == "healthy":
            server.wait_healthy()
        yield server
    finally:
        server.stop()


def sse_events(response: httpx.Response) -> tuple[list[dict], bool]:
    """Parsed ``data:`` events and whether ``[DONE]`` arrived."""
    events, done = [], False
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        payload = line[len("data: ") :]
        if payload == "[DONE]":
            done = True
        else:
            events.append(json.loads(payload))
    return events, done


def stream_generate(server: Standin, prompt: str, n: int) -> tuple[list[dict], bool]:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0}, "stream": True}
    with server.client.stream("POST", "/generate", json=body) as r:
        assert r.status_code == 200
        assert r.headers["X-Simulated"] == "true"
        return sse_events(r)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    """EAGLE3 at accept length 2.5, shared by read-only checks."""
    tmp = tmp_path_factory.mktemp("spec")
    env = {**FAST, "STANDIN_ACCEPT_LENGTH": "2.5", "NCCL_MAX_NCHANNELS": "2", "SGLANG_TEST_MARK": "x1"}
    with standin(tmp, ["--tp-size", "2", *SPEC_ARGV], env) as server:
        yield server


# ----- settings ------------------------------------------------------------------------------
@pytest.mark.stack
def test_settings_precedence_file_default_then_profile_then_env(tmp_path: Path) -> None:
    cfg = tmp_path / "standin.json"
    cfg.write_text(
        json.dumps(
            {
                "default": {"ttft_ms": 11, "verify_ms": 21, "accept_length": 1.5},
                "profiles": {"fused": {"verify_ms": 22, "accept_length": 2.5}},
            }
        )
    )
    base = {"STANDIN_CONFIG": str(cfg)}
    assert load_settings({}) == StandinSettings()
    plain = load_settings(base)
    assert (plain.ttft_ms, plain.verify_ms, plain.accept_length) == (11, 21, 1.5)
    other = load_settings({**base, "KIT_ACTIVE_PROFILE": "no-such-section"})
    assert other == plain
    fused = load_settings({**base, "KIT_ACTIVE_PROFILE": "fused"})
    assert (fused.ttft_ms, fused.verify_ms, fused.accept_length) == (11, 22, 2.5)
    env = load_settings(
        {
            **base,
            "KIT_ACTIVE_PROFILE": "fused",
            "STANDIN_VERIFY_MS": "23",
            "STANDIN_CORRUPT_OUTPUT": "true",
        }
    )
    assert (env.ttft_ms, env.verify_ms, env.accept_length, env.corrupt_output) == (11, 23, 2.5, True)


@pytest.mark.parametrize(
    ("content", "env", "needle"),
    [
        ('{"default": {', {}, "invalid JSON"),
        ('{"default": {"ttft": 5}}', {}, "ttft: unknown setting"),
        ('{"profiles": {"p": {"fault": "explode"}}}', {"KIT_ACTIVE_PROFILE": "p"}, "[profiles.p]: fault"),
        ('{"defaults": {}}', {}, "unknown top-level key"),
        ("{}", {"STANDIN_TTFT": "3"}, "STANDIN_TTFT is not a stand-in setting"),
        ("{}", {"STANDIN_ACCEPT_LENGTH": "0.5"}, "STANDIN_ACCEPT_LENGTH: accept_length"),
    ],
)
def test_bad_settings_raise_user_error(
    tmp_path: Path, content: str, env: dict[str, str], needle: str
) -> None:
    cfg = tmp_path / "bad.json"
    cfg.write_text(content)
    with pytest.raises(UserError) as exc:
        load_settings({"STANDIN_CONFIG": str(cfg), **env})
    assert needle in str(exc.value)


@pytest.mark.stack
@pytest.mark.parametrize(
    ("content", "needle"), [("not json", "invalid JSON"), ('{"default": {"x": 1}}', "x:")]
)
def test_bad_config_exits_2_with_one_line(tmp_path: Path, content: str, needle: str) -> None:
    cfg = tmp_path / "bad.json"
    cfg.write_text(content)
    proc = subprocess.run(
        [sys.executable, "-m", "testsupport.standin", "--port", str(free_port())],
        cwd=REPO,
        env=_child_env({"STANDIN_CONFIG": str(cfg)}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert str(cfg) in proc.stderr and needle in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_argv_parsing_keeps_known_and_ignores_unknown_flags() -> None:
    args = parse_server_argv(["--model", "/m", "--tp", "8", *SPEC_ARGV, "--chunked-prefill-size", "-1"])
    assert args.model_path == "/m" and args.served_model_name == "/m"
    assert args.tp_size == 1  # abbreviations are not expanded: --tp is not --tp-size
    assert "--tp" in args.ignored_args and "--chunked-prefill-size" in args.ignored_args
    assert args.speculative and args.speculative_num_draft_tokens == 4 and args.speculative_num_steps == 3
    assert not parse_server_argv(["--speculative-algorithm", "NONE"]).speculative
    assert parse_server_argv(["--served-model-name", "kimi", "--port", "1"]).served_model_name == "kimi"


# ----- truth functions -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "accept", "verify"),
    [(64, 2.0, 32), (65, 2.5, 26), (64, 2.5, 26), (10, 1.0, 10), (7, 1.3, 6), (5, 9.0, 1)],
)
def test_expected_counts_match_the_chunk_schedule(n: int, accept: float, verify: int) -> None:
    counts = chunk_token_counts(n, accept, speculative=True)
    assert expected_counts(n, accept, speculative=True) == (n, verify)
    assert (sum(counts), len(counts)) == (n, verify)
    assert all(math.floor(accept) <= c <= math.ceil(accept) for c in counts[:-1])
    if (n / accept).is_integer():
        assert n / verify == accept


def test_schedule_without_speculation_and_offsets() -> None:
    assert chunk_token_counts(5, 3.0, speculative=False) == [1] * 5
    assert expected_counts(5, 3.0, speculative=False) == (5, 0)
    assert expected_counts(0, 2.0, speculative=True) == (0, 0)
    assert chunk_offsets_s(3, ttft_ms=40, interval_ms=10) == pytest.approx([0.04, 0.05, 0.06])
    corrupt = StandinSettings(corrupt_output=True, accept_length=3.0)
    assert effective_accept_length(corrupt, speculative=True) == 1.0
    assert effective_accept_length(StandinSettings(accept_length=3.0), speculative=False) == 1.0
    assert generated_text("p", 4) == generated_text("p", 4) != generated_text("p", 4, corrupt=True)
    assert generated_text("p", 4) != generated_text("q", 4)


# ----- the process ---------------------------------------------------------------------------
@pytest.mark.stack
def test_health_is_503_during_startup_then_200(tmp_path: Path) -> None:
    with standin(tmp_path, [], {**FAST, "STANDIN_STARTUP_DELAY_S": "1.0"}, wait="listening") as server:
        first = server.client.get("/health")
        assert first.status_code == 503 and first.headers["X-Simulated"] == "true"
        assert server.client.get("/health_generate").status_code == 503
        body = {"text": "x", "sampling_params": {"max_new_tokens": 1}}
        assert server.client.post("/generate", json=body).status_code == 503
        server.wait_healthy()
        assert server.client.get("/health_generate").status_code == 200
        no_metrics = server.client.get("/metrics")  # started without --enable-metrics, as SGLang
        assert no_metrics.status_code == 404 and no_metrics.headers["X-Simulated"] == "true"
        bad = server.client.post("/generate", json={"sampling_params": {"max_new_tokens": -1}, "text": "x"})
        assert bad.status_code == 400 and bad.headers["X-Simulated"] == "true"
        assert server.client.post("/generate", json={"text": ["a", "b"]}).status_code == 400
        assert "SIMULATED SGLang stand-in" in server.stderr()


@pytest.mark.stack
def test_start_refuses_connections_while_loading_then_503_then_a_slow_health(tmp_path: Path) -> None:
    """As SGLang 0.5.23 starts: the port refuses through the model load, /health answers 503 at once during
    warm-up, then 200 after a one-token generation (at least 1 s: health_delay_s)."""
    env = {**FAST, "STANDIN_LOAD_DELAY_S": "1.5", "STANDIN_STARTUP_DELAY_S": "0.5", "STANDIN_HEALTH_DELAY_S": "1.0"}
    with standin(tmp_path, [], env, wait="none") as server:
        refused = False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the stand-in says it loads: the port must refuse
            if "loading the model" in server.stderr():
                with pytest.raises(httpx.ConnectError):
                    server.client.get("/health")
                refused = True
                break
            time.sleep(0.02)
        assert refused, server.stderr()
        server.wait_listening()
        t0 = time.monotonic()
        codes = set()
        while (r := server.client.get("/health")).status_code != 200:
            codes.add(r.status_code)
            assert time.monotonic() - t0 < 20
        assert time.monotonic() - t0 >= 1.0  # the last, healthy answer took the generation's time
        assert codes <= {503}
        ready = time.monotonic()
        assert server.client.get("/ready").status_code == 200 and time.monotonic() - ready < 1.0


@pytest.mark.stack
def test_streaming_generate_reports_exact_accept_length(tmp_path: Path) -> None:
    env = {**FAST, "STANDIN_ACCEPT_LENGTH": "2.5"}
    with standin(tmp_path, SPEC_ARGV, env) as server:
        events, done = stream_generate(server, "The quick brown fox", 65)
        assert done
        assert len(events) == 26
        final = events[-1]["meta_info"]
        assert (final["completion_tokens"], final["spec_verify_ct"]) == expected_counts(65, 2.5, True)
        assert final["spec_accept_length"] == 2.5
        assert final["spec_correct_drafts_histogram"] == [0, 13, 13, 0]  # 2, 3, 2, 3, ...: 1 and 2 correct drafts
        assert final["finish_reason"]["type"] == "length"
        assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
        per_chunk = [e["meta_info"]["completion_tokens"] for e in events]
        assert [b - a for a, b in zip([0, *per_chunk], per_chunk, strict=False)] == chunk_token_counts(
            65, 2.5, True
        )
        texts = [e["text"] for e in events]
        assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))  # cumulative, as SGLang
        assert texts[-1] == generated_text("The quick brown fox", 65)
        info = server.client.get("/server_info").json()
        assert info["internal_states"][0]["avg_spec_accept_length"] == 2.5
        plain = server.client.post(
            "/generate", json={"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 65}}
        )
        assert plain.json()["text"] == texts[-1] and plain.json()["meta_info"]["spec_verify_ct"] == 26


@pytest.mark.stack
def test_without_speculation_one_token_per_chunk(tmp_path: Path) -> None:
    with standin(tmp_path, ["--enable-metrics"], {**FAST_DECODE, "STANDIN_ACCEPT_LENGTH": "3"}) as server:
        events, done = stream_generate(server, "hello", 9)
        assert done and len(events) == 9
        assert [e["meta_info"]["completion_tokens"] for e in events] == list(range(1, 10))
        assert not any("spec_verify_ct" in e["meta_info"] for e in events)  # only under speculation, as SGLang
        assert "spec_accept_length" not in events[-1]["meta_info"]
        assert "avg_spec_accept_length" not in server.client.get("/server_info").json()["internal_states"][0]
        assert metric(server.client.get("/metrics").text, "sglang:spec_verify_calls_total") == 0


@pytest.mark.stack
def test_chat_completions_stream_and_non_stream(spec_server: Standin) -> None:
    body = {
        "model": "sim",
        "messages": [{"role": "user", "content": "Say something"}],
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with spec_server.client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["X-Simulated"] == "true"
        events, done = sse_events(r)
    assert done
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    content_events = [e for e in events if e["choices"]]
    streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in content_events)
    # as SGLang 0.5.23: the finish reason in a chunk of its own with no token, usage only on the last chunk
    assert content_events[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert {e["choices"][0]["finish_reason"] for e in content_events[:-1]} == {None}
    assert len(content_events) == 2 + expected_counts(10, 2.5, True)[1]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 10
    assert all("usage" not in e for e in events[:-1]) and not any("sglext" in e for e in events)
    # asked for, the speculation details come in an sglext chunk with no choices, before usage
    with spec_server.client.stream("POST", "/v1/chat/completions",
                                   json={**body, "return_spec_tokens_details": True}) as r:
        asked, _ = sse_events(r)
    [ext] = [e for e in asked if "sglext" in e]
    assert asked.index(ext) == len(asked) - 2 and ext["choices"] == []
    details = ext["sglext"]["spec_tokens_details"]
    assert details["spec_verify_ct"] == expected_counts(10, 2.5, True)[1] and details["spec_accept_length"] == 2.5
    hist = details["spec_correct_drafts_histogram"]  # the same as /generate's meta_info
    assert sum(hist) == details["spec_verify_ct"] and sum(k * n for k, n in enumerate(hist)) == 10 - sum(hist)
    whole = spec_server.client.post("/v1/chat/completions", json={**body, "stream": False}).json()
    assert whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"]["content"] == streamed
    assert len(streamed.split()) == 10 and whole["usage"]["completion_tokens"] == 10


@pytest.mark.stack
def test_metrics_count_running_requests(spec_server: Standin) -> None:
    assert metric(spec_server.client.get("/metrics").text, "sglang:num_running_reqs") == 0
    verify_before = metric(spec_server.client.get("/metrics").text, "sglang:spec_verify_calls_total")
    body = {"text": "long one", "sampling_params": {"max_new_tokens": 100}, "stream": True}
    with spec_server.client.stream("POST", "/generate", json=body) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        during = spec_server.client.get("/metrics").text
        assert metric(during, "sglang:num_running_reqs") >= 1
        assert "# SIMULATED" in during
        assert "[DONE]" in "".join(lines)
    after = spec_server.client.get("/metrics").text
    assert metric(after, "sglang:num_running_reqs") == 0
    assert (
        metric(after, "sglang:spec_verify_calls_total") == verify_before + expected_counts(100, 2.5, True)[1]
    )
    assert metric(after, "sglang:spec_accept_length") > 1.0


@pytest.mark.stack
def test_server_info_fields(spec_server: Standin) -> None:
    for path in ("/server_info", "/get_server_info"):
        info = spec_server.client.get(path).json()
        assert info["simulated"] is True and info["version"] == "0.5.23-standin"
        assert "start_time" not in info  # SGLang 0.5.23 sends none: a start is told by these two
        assert isinstance(info["startup_time"]["scheduler_e2e"], float) and isinstance(info["random_seed"], int)
        assert info["tp_size"] == 2 and info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_draft_tokens"] == 4 and info["port"] == spec_server.port
        assert "--mem-fraction-static" in info["ignored_args"]
        assert info["standin"]["accept_length"] == 2.5
        assert isinstance(info["internal_states"], list) and info["internal_states"][0]["simulated"] is True


@pytest.mark.stack
def test_debug_env_shows_child_env_and_argv(spec_server: Standin) -> None:
    data = spec_server.client.get("/debug/env").json()
    assert data["simulated"] is True and data["pid"] == spec_server.proc.pid
    assert data["env"]["NCCL_MAX_NCHANNELS"] == "2" and data["env"]["SGLANG_TEST_MARK"] == "x1"
    assert "PATH" not in data["env"]
    assert data["argv"] == spec_server.argv


@pytest.mark.stack
def test_profile_section_selected_by_active_profile(tmp_path: Path) -> None:
    cfg = tmp_path / "standin.json"
    cfg.write_text(
        json.dumps({"default": {"accept_length": 2.0}, "profiles": {"fused": {"accept_length": 3.0}}})
    )
    env = {**FAST, "STANDIN_CONFIG": str(cfg), "KIT_ACTIVE_PROFILE": "fused"}
    with standin(tmp_path, SPEC_ARGV, env) as server:
        events, _ = stream_generate(server, "p", 12)
        assert len(events) == 4 and events[-1]["meta_info"]["spec_accept_length"] == 3.0
        assert server.client.get("/server_info").json()["standin"]["accept_length"] == 3.0
        assert "profile=fused" in server.stderr()


@pytest.mark.stack
def test_corrupt_output_changes_text_and_collapses_accept_length(tmp_path: Path) -> None:
    env = {**FAST, "STANDIN_ACCEPT_LENGTH": "2.0", "STANDIN_CORRUPT_OUTPUT": "1"}
    with standin(tmp_path, SPEC_ARGV, env) as server:
        events, done = stream_generate(server, "same prompt", 8)
    assert done and len(events) == 8
    assert events[-1]["meta_info"]["spec_accept_length"] == 1.0
    assert events[-1]["text"] != generated_text("same prompt", 8)
    assert events[-1]["text"] == generated_text("same prompt", 8, corrupt=True)


@pytest.mark.stack
def test_fault_crash_at_start_exits_nonzero(tmp_path: Path) -> None:
    server = Standin([], {"STANDIN_FAULT": "crash_at_start"}, tmp_path / "crash.log")
    try:
        assert server.proc.wait(timeout=30) == 1
        assert "crash_at_start" in server.stderr() and "SIMULATED SGLang stand-in" in server.stderr()
    finally:
        server.stop()


@pytest.mark.stack
def test_fault_hang_at_start_stays_unhealthy(tmp_path: Path) -> None:
    env = {**FAST, "STANDIN_FAULT": "hang_at_start"}
    with standin(tmp_path, [], env, wait="listening") as server:
        for _ in range(5):
            assert server.client.get("/health").status_code == 503
            time.sleep(0.1)
        assert server.proc.poll() is None


@pytest.mark.stack
def test_fault_die_mid_stream_truncates_and_exits(tmp_path: Path) -> None:
    env = {
        **FAST,
        "STANDIN_FAULT": "die_mid_stream",
        "STANDIN_DIE_ON_REQUEST": "2",
        "STANDIN_DIE_AFTER_CHUNKS": "3",
    }
    with standin(tmp_path, SPEC_ARGV, env) as server:
        accept = server.client.get("/server_info").json()["standin"]["effective_accept_length"]
        events, done = stream_generate(server, "first survives", 20)
        assert done and len(events) == expected_counts(20, accept, True)[1]
        received: list[dict] = []
        body = {"text": "second dies", "sampling_params": {"max_new_tokens": 20}, "stream": True}
        with pytest.raises(httpx.HTTPError):
            with server.client.stream("POST", "/generate", json=body) as r:
                for line in r.iter_lines():
                    assert line != "data: [DONE]"
                    if line.startswith("data: "):
                        received.append(json.loads(line[6:]))
        assert len(received) == 3
        assert server.proc.wait(timeout=10) == 1
        assert "die_mid_stream" in server.stderr()


@pytest.mark.stack
def test_start_and_stop_profile_write_chrome_traces(spec_server: Standin, tmp_path: Path) -> None:
    c = spec_server.client
    assert c.post("/stop_profile").status_code == 500  # not started, as SGLang
    out = tmp_path / "traces"
    r = c.post(
        "/start_profile", json={"output_dir": str(out), "profile_id": "run1", "activities": ["CPU", "GPU"]}
    )
    assert r.status_code == 200
    assert c.post("/start_profile", json={"output_dir": str(out)}).status_code == 500  # already running
    stream_generate(spec_server, "traced", 10)
    assert c.post("/stop_profile").status_code == 200
    files = sorted(out.glob("*.trace.json.gz"))
    assert [f.name for f in files] == ["run1-TP-0.trace.json.gz", "run1-TP-1.trace.json.gz"]
    trace = json.loads(gzip.decompress(files[0].read_bytes()))
    assert trace["simulated"] is True
    kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in kernels}
    assert any(n.startswith("ncclDevKernel_AllReduce") for n in names)
    assert any("gemm" in n for n in names)
    passes = {e["args"]["pass"] for e in kernels}
    assert len(passes) == expected_counts(10, 2.5, True)[1]
    comm = sum(e["dur"] for e in kernels if "AllReduce" in e["name"])
    assert comm / sum(e["dur"] for e in kernels) == pytest.approx(0.7, rel=1e-3)


@pytest.mark.stack
def test_profile_num_steps_stops_by_itself_and_follows_env(tmp_path: Path) -> None:
    env = {**FAST, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1", "SGLANG_TORCH_PROFILER_DIR": str(tmp_path / "d")}
    with standin(tmp_path, ["--speculative-algorithm", "NGRAM"], env) as server:
        assert (
            server.client.post("/start_profile", json={"num_steps": 2, "profile_id": "auto"}).status_code
            == 200
        )
        stream_generate(server, "p", 12)
        files = list((tmp_path / "d").glob("auto-TP-0.trace.json.gz"))
        assert len(files) == 1
        trace = json.loads(gzip.decompress(files[0].read_bytes()))
        names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert any("cross_device_reduce" in n for n in names)
        assert server.client.post("/stop_profile").status_code == 500  # already stopped by num_steps


@pytest.mark.stack
def test_sigterm_mid_stream_exits_zero(tmp_path: Path) -> None:
    with standin(tmp_path, [], {**FAST_DECODE, "STANDIN_DECODE_MS": "50"}) as server:
        body = {"text": "slow", "sampling_params": {"max_new_tokens": 1000}, "stream": True}
        with server.client.stream("POST", "/generate", json=body) as r:
            assert next(line for line in r.iter_lines() if line.startswith("data: "))
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=10) == 0
        assert "shutting down" in server.stderr()
