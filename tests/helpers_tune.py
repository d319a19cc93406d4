"""What the `bench tune` stack tests share (tests/test_bench_tune_runner*.py): a real `launcher serve`
(supervisord, control API) over the stand-in, one per test module, with profiles whose right answer is
known: they change the stand-in's speed through their [env] (STANDIN_DECODE_MS), their numerics
(STANDIN_NUMERICS: a correct reordering or a broken reduction), their log-probabilities (STANDIN_LOGPROBS)
or their output (STANDIN_ACCEPT_LENGTH); and the tune run as its own process, as a user runs it. The tests
are split over several files so that the parallel runner spreads them (a module's tests share one worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.net import until
from testsupport.stack import REPO

STANDIN = {"default": {"startup_delay_s": 0.2, "ttft_ms": 5, "decode_ms": 3, "verify_ms": 4, "accept_length": 2.0}}
PROFILES = {
    # twice baseline's speed, with a correct all-reduce in another order: its texts part from baseline's
    "fast": '[env]\nSTANDIN_DECODE_MS = "1.5"\nSTANDIN_NUMERICS = "reorder"\n',
    "wrong": '[env]\nSTANDIN_DECODE_MS = "1"\nSTANDIN_NUMERICS = "corrupt"\n',  # faster still, but a broken reduction
    "mute": '[env]\nSTANDIN_DECODE_MS = "1.2"\nSTANDIN_LOGPROBS = "0"\n',  # fast, but sends no log-probabilities
    "same": "",
    "same2": "",
    "lazy": '[env]\nSTANDIN_ACCEPT_LENGTH = "1.02"\n',  # same text, but every draft rejected
    "quick": '[env]\nSTANDIN_VERIFY_MS = "2"\n',  # twice baseline's speed under speculation
    "mha": '[server]\nattention-backend = "trtllm_mha"\n',  # SGLang refuses top-k > 1 with it
}


def _profile(name: str, body: str) -> str:
    return f'description = "test: {name}"\nstatus = "experimental"\nextends = "baseline"\n{body}'


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from testsupport.stack import standin_stack

    with standin_stack(tmp_path_factory.mktemp("tune"), STANDIN) as s:
        for name, body in PROFILES.items():
            (s.profiles_dir / f"{name}.toml").write_text(_profile(name, body))
        yield s


@pytest.fixture(autouse=True)
def from_baseline(stack):
    """Each test starts from baseline + off, whatever the one before left (a failure must not cascade)."""
    until(lambda: stack.status()["state"] not in ("switching", "recovering"), timeout=120, what="no switch running")
    st = stack.status()
    if (st["profile"], st["spec"], st["state"]) != ("baseline", "off", "serving"):
        assert stack.switch("baseline", "off").json()["outcome"] in ("switched", "unchanged")


# The stand-in's repeats take a fifth of a second, so on a loaded test machine a run of them swings by a third
# with the load: the final is 4 repeats in 4 blocks of one (mirrored, nearly interleaved: a burst lands on
# every arm alike), where the default 4 blocks of 8 would leave 2-3 long runs an arm and, resampled as runs,
# decide nothing on such a machine.
FINAL = ("--final-blocks", "4", "--final-repeats", "4")


def tune_argv(stack, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench", "tune", "--url", stack.server_url, "--control", stack.control_url,
            "--spec", "off", "--max-tokens", "24", "--num-prompts", "2", "--warmup", "1", "--budget", "10m",
            "--switch-timeout", "60", "--health-timeout", "30", *FINAL, "--out", str(out), *extra]


def tune_env(stack) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "STANDIN_"))}
    # 2 prompts of 24 tokens compare 48 tokens, under the gate's default of 200 ("not enough evidence", so
    # nothing could win): these tests lower it; the race measures enough tokens for the default (RACE)
    return {**env, "KIT_CONTROL_TOKEN": stack.token, "PYTHONPATH": str(REPO),
            "KIT_PROFILES_DIR": str(stack.profiles_dir), "KIT_GATE_MIN_TOKENS": "32"}


def run_tune(stack, out: Path, *extra: str, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(tune_argv(stack, out, *extra), cwd=REPO, env={**tune_env(stack), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def result(out: Path) -> dict:
    found = sorted(out.glob("*/tune.json"), key=lambda p: p.stat().st_mtime)
    assert found, f"no tune.json under {out}"
    return json.loads(found[-1].read_text())


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines() if line.strip()]


def keys(lines: list[dict]) -> list[tuple[str, str, int]]:
    return [(e["label"], e["phase"], e["round"]) for e in lines]


def on_start_plan(stack) -> None:
    st = stack.wait_state({"serving"})
    assert (st["profile"], st["spec"]) == ("baseline", "off"), st
