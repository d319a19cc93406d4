"""The bench and the start-up reader against real SGLang 0.5.23 (the session's shared server, TP 2):
`bench run` writes a complete bundle through /generate and through the chat API with the same token counts,
and the start-up reader reads the real log, with its rank prefixes, into a record whose verdicts say why no
GPU backend runs on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from launcher.profiles.plan import Plan
from launcher.runtime import activation
from launcher.runtime.start_lines import RANK_PREFIX, rank_of, scan
from launcher.state_layout import StatePaths
from testsupport.net import until
from testsupport.stack import REPO

MAX_TOKENS = 12


def bench(stack, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env.update(KIT_CONTROL_TOKEN=stack.token, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "bench", "run", "--url", stack.server_url, "--control", stack.control_url,
         "--no-switch", "--repeats", "1", "--num-prompts", "2", "--max-tokens", str(MAX_TOKENS), "--warmup", "0",
         "--read-timeout", "600", "--out", str(out), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


def bundle(out: Path) -> tuple[dict, dict, list[dict]]:
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [cell_file] = [p for p in run_dir.glob("*.json") if p.name not in ("manifest.json",) and "__" in p.name]
    cell = json.loads(cell_file.read_text())
    rows = [json.loads(line) for line in cell_file.with_name(cell_file.stem + ".requests.jsonl").read_text().splitlines()]
    return manifest, cell, rows


def test_bench_run_writes_a_complete_bundle_and_the_chat_api_counts_the_same(serving_stack, tmp_path):
    gen = bench(serving_stack, tmp_path / "generate")
    assert gen.returncode == 0, gen.stderr[-3000:]
    manifest, cell, rows = bundle(tmp_path / "generate")
    assert manifest["simulated"] is False and cell["valid"] is True, cell.get("invalid_reason")
    [rep] = cell["per_repeat"]
    assert rep["valid"] and rep["completed"] == 2 and rep["failed"] == 0 and rep["output_throughput"] > 0
    assert cell["profile"] == "real-serving" and cell["spec"] == "off"
    assert cell["accept_length"] is None  # no speculation: SGLang sends no spec_verify_ct, so none is made up
    chat = bench(serving_stack, tmp_path / "chat", "--api", "chat")
    assert chat.returncode == 0, chat.stderr[-3000:]
    _, chat_cell, chat_rows = bundle(tmp_path / "chat")
    assert chat_cell["valid"] is True, chat_cell.get("invalid_reason")

    def counts(rs):
        return sorted((r["prompt_id"], r["completion_tokens"]) for r in rs if r.get("ok"))

    assert counts(rows) == counts(chat_rows) and len(counts(rows)) == 2
    assert all(0 < n <= MAX_TOKENS for _, n in counts(rows))


def test_the_start_reader_reads_the_real_log_and_says_why_no_gpu_backend_runs(serving_stack):
    text = StatePaths(serving_stack.state_dir).server_log.read_text(errors="replace")
    tagged = {rank_of(line) for line in text.splitlines() if RANK_PREFIX.match(line)}
    assert {"TP0", "TP1"} <= tagged, sorted(tagged)  # SGLang's own [time TPn] prefixes, read per rank
    records = [r for r in scan(text) if r["profile"] == "real-serving"]
    assert records and records[-1]["pid"], records
    record = records[-1]
    plan = Plan.from_json(json.loads(StatePaths(serving_stack.state_dir).profile_json.read_text()))
    expecting = plan.model_copy(update={"expects": ["fusion", "pcie-ipc", "mscclpp"]})
    statuses, decode = activation.assess(expecting, record)
    for st in statuses:  # on CPU no GPU backend logs its line: each is inactive, and says which line is missing
        assert st["active"] is False and st["verdict"] == "inactive", st
        assert "no '" in st["evidence"] and "in the server log since it started" in st["evidence"], st
    assert decode["backend"] in ("nccl", None) and decode["why"], decode
    status = serving_stack.status()
    assert status["backends"] == [] and status["decode_allreduce"]["why"], status  # baseline expects none


def _running(stack) -> float:
    """sglang:num_running_reqs in the real server's scrape (0 when it does not answer)."""
    try:
        text = stack.get("/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("sglang:num_running_reqs")]
    return max(values, default=0.0)


@pytest.mark.restarts_shared
def test_a_server_killed_during_a_repeat_makes_the_cell_invalid_with_the_reason(serving_stack, tmp_path):
    """The real server dies in the middle of a timed repeat (SIGKILL to its launch process, once a request
    runs) and supervisord restarts it: the repeat is invalid, the cell has no numbers to quote, and the reason
    says what happened. Runs last among the shared server's tests (restarts_shared), and waits for it to
serve again."""
    out = tmp_path / "killed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env.update(KIT_CONTROL_TOKEN=serving_stack.token, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", "--url", serving_stack.server_url, "--control", serving_stack.control_url,
         "--no-switch", "--repeats", "1", "--num-prompts", "64", "--max-tokens", "64", "--ignore-eos", "--warmup", "0",
         "--read-timeout", "60", "--out", str(out)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: _running(serving_stack) >= 1 or proc.poll() is not None, 600, "a timed request runs")
        assert proc.poll() is None, proc.stdout.read()[-3000:] if proc.stdout else ""
        serving_stack.launch_process().kill()
        output, _ = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, cell, rows = bundle(out)
    assert cell["valid"] is False and cell["invalid_reason"], output[-3000:]
    [rep] = cell["per_repeat"]
    assert rep["valid"] is False and rep["failed"] >= 1, rep
    assert any(not r.get("ok") for r in rows)
    serving_stack.wait_state({"serving"})  # the shared server is back for the tests after this one


def test_bench_gate_reads_real_generate_replies_at_two_batch_sizes(serving_stack):
    """`bench gate` with the real server as both sides, through /generate alone: SGLang's own log-probability
    replies are parsed at concurrency 1 and 2, the reference's two levels give the null, and at concurrency 1
    the same server answers with the same log-probabilities to within rounding (its prefix cache may serve the
    second ask: another kernel path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    env.update(PYTHONPATH=str(REPO), KIT_GATE_MIN_TOKENS="16")  # 2 prompts x 12 tokens on a CPU
    r = subprocess.run(
        [sys.executable, "-m", "bench", "gate", "--reference", serving_stack.server_url, "--candidate",
         serving_stack.server_url, "--num-prompts", "2", "--max-tokens", str(MAX_TOKENS), "--concurrency", "1,2",
         "--timeout", "600", "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode in (0, 3), r.stderr[-3000:]  # PASS, or a null too short on a random tiny model: never FAIL
    v = json.loads(r.stdout)
    assert set(v["levels"]) == {"1", "2"} and v["reference"]["url"] == serving_stack.server_url
    for level in v["levels"].values():  # SGLang's replies parsed at both levels: statistics, never "none sent"
        assert level["stats"] is not None and level["stats"]["prompts"] == 2 and level["stats"]["missing"] == 0, level
    alone = v["levels"]["1"]["stats"]
    assert alone["mean_delta"] is None or alone["mean_delta"] < 0.001, alone
    assert v["tolerance"]["null"] is None or v["tolerance"]["null"]["label"] == "reference at concurrency 1 against 2"
