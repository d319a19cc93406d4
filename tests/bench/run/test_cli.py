"""bench/run/cli.py and bench/client/server_client.py against a bare SIMULATED stand-in server (real HTTP, real subprocesses, --no-switch)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.client.server_client import ServerClient
from bench.client.workload import build_workload
from testsupport.net import free_port, wait_healthy
from testsupport.standin import expected_counts

pytestmark = pytest.mark.stack  # every test here starts a process

REPO = Path(__file__).resolve().parents[3]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "NCCL_", "SGLANG_"))}
    env["PYTHONPATH"] = str(REPO)
    env["KIT_CONTROL_PORT"] = str(free_port())  # no control API answers there: --no-switch labels from flags
    env.update(extra)
    return env


class Standin:
    """`python -m testsupport.standin` on a free port; stopped by the fixture."""

    def __init__(self, spec: bool, settings: dict[str, str]):
        self.port = free_port()
        args = ["--port", str(self.port), "--enable-metrics"]
        if spec:
            args += ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4"]
        env = clean_env(STANDIN_STARTUP_DELAY_S="0.1", **{f"STANDIN_{k.upper()}": v for k, v in settings.items()})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testsupport.standin", *args], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_healthy(self.url, self.proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def standin():
    servers: list[Standin] = []

    def make(spec: bool = True, **settings: str) -> Standin:
        s = Standin(spec, settings)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def bench(*args: str, cwd: Path = REPO, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.run.cli", *args], cwd=cwd, env=clean_env(**(env or {})),
        capture_output=True, text=True, timeout=timeout,
    )


def only_bundle(out: Path) -> Path:
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def run_client(url: str, n: int, max_tokens: int, concurrency: int = 1, api: str = "generate"):
    async def go():
        async with ServerClient(url, max_tokens=max_tokens, api=api, concurrency=concurrency) as c:
            c.configure_from_server_info(await c.server_info())
            return await c.run(build_workload("chat", n), concurrency)

    return asyncio.run(go())


# ----- client vs the stand-in's truth ---------------------------------------------------------------
@pytest.mark.parametrize(("accept", "max_tokens"), [("2.5", 65), ("2.5", 64), ("3", 30)])
def test_accept_length_is_exact(standin, accept, max_tokens):
    s = standin(ttft_ms="5", verify_ms="2", accept_length=accept)
    records, _ = run_client(s.url, 3, max_tokens, concurrency=3)
    n, verify = expected_counts(max_tokens, float(accept), True)
    for r in records:
        assert r.ok, r.error
        assert (r.completion_tokens, r.spec_verify_ct) == (n, verify)
        assert r.accept_length == n / verify
        assert r.chunks == verify  # one streamed chunk per verify pass


def test_timing_close_to_configured(standin):
    s = standin(ttft_ms="60", verify_ms="25", accept_length="2")
    records, _ = run_client(s.url, 2, 40)
    for r in records:
        assert r.ok, r.error
        assert 0.060 <= r.ttft_s < 0.120  # loose: 2-core CI; tight bounds live in tools/bench_accuracy.py
        gaps = r.chunk_gaps_s
        assert len(gaps) == 19
        assert 0.020 <= sum(gaps) / len(gaps) < 0.040
        truth_tpot = 19 * 0.025 / 39  # (chunks - 1) * interval / (tokens - 1)
        assert truth_tpot * 0.8 < r.tpot_s < truth_tpot * 1.5
        assert r.text.strip()


def test_no_spec_gives_no_accept_length(standin):
    s = standin(spec=False, ttft_ms="5", decode_ms="2")
    records, _ = run_client(s.url, 2, 10)
    # SGLang 0.5.23 sends no spec_verify_ct without speculation (tokenizer_manager.py:3150-3172), nor does the stand-in
    assert all(r.ok and r.spec_verify_ct is None and r.accept_length is None and r.chunks == 10 for r in records)


def test_chat_api_streams_and_counts_tokens(standin):
    s = standin(ttft_ms="5", verify_ms="2", accept_length="2")
    records, _ = run_client(s.url, 2, 16, api="chat")
    for r in records:
        assert r.ok, r.error
        assert r.completion_tokens == 16  # from the usage chunk
        assert r.chunks == 8 and r.ttft_s is not None
        assert len(r.text.split()) == 16


def test_server_death_mid_stream_is_a_recorded_error(standin):
    s = standin(ttft_ms="5", verify_ms="5", fault="die_mid_stream", die_on_request="1", die_after_chunks="2")
    records, _ = run_client(s.url, 1, 40)
    assert not records[0].ok
    assert "stream" in records[0].error


# ----- bench run --no-switch -----------------------------------------------------------------------
def test_run_writes_bundle_and_report_rebuilds_identical_summary(standin, tmp_path):
    s = standin(ttft_ms="10", verify_ms="4", accept_length="2")
    out = tmp_path / "res"
    r = bench("--url", s.url, "--no-switch", "--repeats", "2", "--num-prompts", "3", "--max-tokens", "16",
              "--concurrency", "1,3", "--warmup", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    run_dir = only_bundle(out)
    assert f"SIMULATED bench bundle: {run_dir}" in r.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["simulated"] is True
    assert manifest["server"]["sglang_version"] == "0.5.23-standin"
    assert manifest["host"]["available"] in (True, False)
    assert manifest["settings"]["concurrency"] == [1, 3]
    assert manifest["kit"]["git_sha"]
    cell = json.loads((run_dir / "current__eagle3.json").read_text())
    assert cell["valid"] is True and cell["invalid_reason"] is None
    assert cell["accept_length"] == 2.0 and cell["accept_length_source"] == "meta_info"
    assert cell["completed"] == 6 and len(cell["per_repeat"]) == 4
    for key in ("duration", "total_output_tokens", "request_throughput", "output_throughput", "mean_ttft_ms",
                "median_tpot_ms", "p90_itl_ms", "p99_e2e_latency_ms", "output_throughput_mean", "output_throughput_sd"):
        assert cell[key] is not None, key
    assert set(cell["by_concurrency"]) == {"1", "3"}
    assert cell["correctness"]["status"] == "n/a (no baseline)"
    lines = (run_dir / "current__eagle3.requests.jsonl").read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[0])["ok"] is True
    summary = (run_dir / "summary.md").read_text()
    assert "SIMULATED" in summary and "| current | eagle3 | 1 | OK |" in summary
    for png in ("throughput.png", "tpot.png", "throughput_c3.png", "tpot_c3.png"):
        assert (run_dir / png).stat().st_size > 1000
    before_csv = (run_dir / "summary.csv").read_text()
    for f in ("summary.md", "summary.csv", "throughput.png", "tpot.png"):
        (run_dir / f).unlink()
    rep = subprocess.run([sys.executable, "-m", "bench.report.render", str(run_dir)], cwd=REPO, env=clean_env(),
                         capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert (run_dir / "summary.md").read_text() == summary
    assert (run_dir / "summary.csv").read_text() == before_csv
    assert (run_dir / "throughput.png").is_file() and (run_dir / "tpot.png").is_file()


def test_run_records_acceptance_by_draft_position_consistent_with_the_accept_length(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="2", accept_length="2.5")  # EAGLE3, 4 draft tokens, a chain
    r = bench("--url", s.url, "--no-switch", "--repeats", "2", "--num-prompts", "2", "--max-tokens", "16",
              "--concurrency", "1,2", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run_dir = only_bundle(tmp_path)
    cell = json.loads((run_dir / "current__eagle3.json").read_text())
    assert set(cell["acceptance"]) == {"1", "2"}
    for level, acc in cell["acceptance"].items():
        rates = acc["position_rates"]
        assert len(rates) == 3 and all(a >= b for a, b in zip(rates, rates[1:], strict=False)), rates
        assert sum(acc["correct_drafts_histogram"]) == acc["verifies"] > 0
        accept = cell["by_concurrency"][level]["accept_length"]
        assert 1 + sum(rates) == pytest.approx(accept, abs=1e-9) == acc["accept_length"]
    # 16 tokens at 2.5 per pass: 2, 3, 2, 3, 2, 3, 1 per request, 4 requests a level
    assert cell["acceptance"]["1"]["correct_drafts_histogram"] == [4, 12, 12, 0]
    assert "## Acceptance by draft position" in (run_dir / "summary.md").read_text()
    assert (run_dir / "acceptance.csv").read_text().startswith("profile,spec,spec_params,concurrency,")
    rows = [json.loads(x) for x in (run_dir / "current__eagle3.requests.jsonl").read_text().splitlines()]
    assert all(row["spec_correct_drafts_histogram"] == [1, 3, 3, 0] for row in rows)


def test_chat_api_accept_length_from_metrics(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="3", accept_length="2")
    r = bench("--url", s.url, "--no-switch", "--api", "chat", "--repeats", "1", "--num-prompts", "2",
              "--max-tokens", "12", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    cell = json.loads((only_bundle(tmp_path) / "current__eagle3.json").read_text())
    # per request, from the sglext chunk SGLang sends when asked (return_spec_tokens_details), as /generate does
    assert cell["accept_length"] == 2.0 and cell["accept_length_source"] == "meta_info"
    assert cell["acceptance"]["1"]["accept_length"] == 2.0  # the histogram comes in the same sglext chunk


def test_server_death_makes_run_invalid_and_bundle_still_written(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="5", fault="die_mid_stream", die_on_request="3", die_after_chunks="2")
    r = bench("--url", s.url, "--no-switch", "--repeats", "2", "--num-prompts", "3", "--max-tokens", "20",
              "--warmup", "1", "--health-timeout", "1", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run_dir = only_bundle(tmp_path)
    cell = json.loads((run_dir / "current__eagle3.json").read_text())
    assert cell["valid"] is False
    assert "requests failed" in cell["invalid_reason"] or "did not come back" in cell["invalid_reason"]
    first = cell["per_repeat"][0]
    assert first["valid"] is False and "stream broke" in first["invalid_reason"]
    assert first["output_throughput"] is None and cell["output_throughput"] is None  # never a number
    summary = (run_dir / "summary.md").read_text()
    assert "| INVALID | invalid:" in summary


def test_unreachable_url_exits_1_quickly_without_bundle(tmp_path):
    t = time.monotonic()
    r = bench("--url", f"http://127.0.0.1:{free_port()}", "--no-switch", "--connect-timeout", "2", "--out", str(tmp_path))
    assert r.returncode == 1
    assert "cannot reach the server" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t < 30
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_exit_2(tmp_path):
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--profiles", "baseline,fused", "--out", str(tmp_path))
    assert r.returncode == 2 and "--profiles 'baseline,fused' with --no-switch" in r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--spec", "all", "--out", str(tmp_path))
    assert r.returncode == 2 and "--spec 'all' with --no-switch" in r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--profiles", ",", "--out", str(tmp_path))
    assert r.returncode == 2 and "--profiles is empty" in r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--concurrency", "0", "--out", str(tmp_path))
    assert r.returncode == 2 and "--concurrency" in r.stderr
    r = bench("--url", "ftp://x", "--no-switch", "--out", str(tmp_path))
    assert r.returncode == 2 and "--url 'ftp://x'" in r.stderr
    r = bench("--no-switch", "--out", str(tmp_path), env={"KIT_SERVER_URL": "not-a-url"})
    assert r.returncode == 2 and "KIT_SERVER_URL='not-a-url'" in r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--leave-on", "fused+eagle3", "--out", str(tmp_path))
    assert r.returncode == 2 and "--leave-on names a cell this run switches to" in r.stderr, r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--no-switch", "--min-exact-match", "0.9", "--out", str(tmp_path))
    assert r.returncode == 2 and "unrecognized arguments: --min-exact-match" in r.stderr  # the KIT_GATE_* settings now
    for name, value in (("KIT_GATE_P99_DELTA", "0"), ("KIT_GATE_MIN_TOKENS", "many")):
        # nothing answers at the URL: had the run got that far, it would say so and exit 1
        r = bench("--url", "http://127.0.0.1:1", "--out", str(tmp_path), env={name: value, "KIT_CONTROL_TOKEN": "t"})
        assert r.returncode == 2 and name in r.stderr and "cannot reach" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_switch_labels_from_the_flags_when_no_control_api_answers(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="3", accept_length="2")
    r = bench("--url", s.url, "--no-switch", "--profiles", "baseline", "--repeats", "1", "--num-prompts", "2",
              "--max-tokens", "8", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run_dir = only_bundle(tmp_path)
    assert (run_dir / "baseline__eagle3.json").is_file()  # spec from the server's /server_info
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["matrix"] == ["baseline__eagle3"]
    assert "unknown" in manifest["plans"]["baseline__eagle3"]["error"]


def test_no_switch_spec_that_contradicts_the_server_exits_2(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="3", accept_length="2")
    r = bench("--url", s.url, "--no-switch", "--spec", "off", "--out", str(tmp_path))
    assert r.returncode == 2 and "--spec off with --no-switch, but the server says it runs eagle3" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_writes_partial_bundle(standin, tmp_path):
    s = standin(ttft_ms="20", verify_ms="40", accept_length="2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.run.cli", "--url", s.url, "--no-switch", "--repeats", "5", "--num-prompts", "4",
         "--max-tokens", "60", "--warmup", "0", "--out", str(tmp_path)],
        cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("*/*.requests.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first repeat has finished
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    run_dir = only_bundle(tmp_path)
    assert "partial bundle (complete: false)" in err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["interrupted"] is True
    cell = json.loads((run_dir / "current__eagle3.json").read_text())
    assert cell["valid"] is False and "interrupted" in cell["invalid_reason"]
    assert "**INCOMPLETE** (interrupted)" in (run_dir / "summary.md").read_text()


def test_compare_refuses_mismatched_fingerprints_and_force_compares(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="3", accept_length="2")
    r = bench("--url", s.url, "--no-switch", "--repeats", "2", "--num-prompts", "2", "--max-tokens", "10",
              "--warmup", "0", "--out", str(tmp_path / "a"))
    assert r.returncode == 0, r.stderr
    a = only_bundle(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)

    def cmp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bench.report.compare", *args], cwd=REPO, env=clean_env(),
                              capture_output=True, text=True, timeout=60)

    same = cmp(str(a), str(b), "--json")
    assert same.returncode == 0, same.stderr
    data = json.loads(same.stdout)
    assert data["differences"] == [] and data["simulated"] is True
    tps = next(x for x in data["rows"] if x["metric"] == "tok/s")
    assert tps["delta"] == 0.0 and tps["significant"] is False

    manifest = json.loads((b / "manifest.json").read_text())
    manifest["host"] = {"available": True, "gpus": [{"name": "NVIDIA H200"}], "driver": "999.1"}
    manifest["server"]["sglang_version"] = "0.5.99"
    (b / "manifest.json").write_text(json.dumps(manifest))
    cell = json.loads((b / "current__eagle3.json").read_text())
    cell["plan_digest"] = "0000aaaa"
    cell["by_concurrency"]["1"]["output_throughput_mean"] *= 2
    (b / "current__eagle3.json").write_text(json.dumps(cell))

    refused = cmp(str(a), str(b))
    assert refused.returncode == 2
    for what in ("GPU names", "driver", "sglang version", "plan digest of current__eagle3", "--force"):
        assert what in refused.stderr
    forced = cmp(str(a), str(b), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "fingerprints differ" in forced.stdout and "driver" in forced.stdout
    assert "tok/s" in forced.stdout and "+100.0%" in forced.stdout


def test_prompts_file_and_temperature_reach_the_bundle(standin, tmp_path):
    s = standin(ttft_ms="5", verify_ms="2", accept_length="2")
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text('{"id": "a", "text": "first"}\n{"id": "b", "text": "second"}\n{"id": "c", "text": "third"}\n')
    out = tmp_path / "res"
    r = bench("--url", s.url, "--no-switch", "--repeats", "1", "--prompts", str(prompts), "--temperature", "0.6",
              "--max-tokens", "8", "--warmup", "0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    run_dir = only_bundle(out)
    settings = json.loads((run_dir / "manifest.json").read_text())["settings"]
    assert settings["temperature"] == 0.6 and settings["num_prompts"] == 3  # all of the file: --num-prompts unset
    assert settings["prompts"] == str(prompts) and len(settings["prompts_sha256"]) == 64
    rows = [json.loads(x) for x in (run_dir / "current__eagle3.requests.jsonl").read_text().splitlines()]
    assert [x["prompt_id"] for x in rows] == ["a", "b", "c"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    r = bench("--url", s.url, "--no-switch", "--prompts", str(bad), "--out", str(tmp_path / "none"))
    assert r.returncode == 2 and "bad.jsonl:2: duplicate id 'a'" in r.stderr
    assert not (tmp_path / "none").exists()
