"""tools/gpu/graph_mixing.py, the parts that run without a GPU: arguments, schedule, summary, watchdog, dry run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "tools" / "gpu" / "graph_mixing.py"
spec = importlib.util.spec_from_file_location("graph_mixing", TOOL)
gm = importlib.util.module_from_spec(spec)
sys.modules["graph_mixing"] = gm
spec.loader.exec_module(gm)


def test_defaults_are_the_decode_shape_and_the_kit_presets():
    args = gm.parse_args(["--out", "x"])
    from bench.allreduce.sizes import VERIFY_TOKENS

    assert args.rows == list(VERIFY_TOKENS)
    assert (args.hidden, args.layers, args.nranks, args.rounds, args.safety_steps) == (7168, 61, 2, 2, 10000)
    assert args.total_timeout_s <= 480


@pytest.mark.parametrize("bad", [["--rows", "0"], ["--rows", "a"], ["--layers", "0"], ["--safety-steps", "-1"],
                                 ["--pair-timeout-s", "0"], ["--k", "9000"], ["--unknown"]])
def test_bad_arguments_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        gm.parse_args(["--out", "x", *bad])
    assert exc.value.code == 2


def test_dry_run_shrinks_sizes():
    args = gm.parse_args(["--out", "x", "--dry-run"])
    assert args.hidden <= 64 and args.k <= 16 and args.safety_steps <= 20 and args.layers == 61


def test_schedule_interleaves_a_b_a_b_and_runs_same_comm_last():
    pairs = gm.schedule(2)
    assert [(p.case, p.setting) for p in pairs] == [("main", "1"), ("main", "0"), ("main", "1"), ("main", "0"),
                                                    ("same-comm", "1"), ("same-comm", "0")]
    assert len({p.label for p in pairs}) == len(pairs)
    assert [p.case for p in gm.schedule(1, same_comm=False)] == ["main", "main"]


def test_layer_sequence_is_gemm_allreduce_twice_per_layer():
    ops = gm.build_layers(61)
    assert len(ops) == 61 * 4 and sum(op == "allreduce" for op, _, _ in ops) == 122
    assert [op for op, _, _ in ops[:4]] == ["gemm", "allreduce", "gemm", "allreduce"]
    assert ops[4][1] == 1


def _main_pair(setting, rnd, step, gemm, wrong=0, safety_ok=True, status="ok"):
    rank = {"perf": {"4": {"step_us": step, "gemm_only_us": gemm, "ar_only_us": 122 * 7.0,
                           "allreduces_per_step": 122, "wrong": wrong}}}
    if safety_ok is not None:
        rank["safety"] = {"done": safety_ok, "wrong_graph": 0, "wrong_eager": 0}
    return {"label": f"main-{rnd}-mix{setting}", "case": "main", "setting": setting, "status": status,
            "ranks": [rank, rank]}


def test_summary_cost_and_verdict():
    pairs = [_main_pair("1", 1, 2000.0, 800.0), _main_pair("0", 1, 1390.0, 800.0),
             _main_pair("1", 2, 2010.0, 800.0), _main_pair("0", 2, 1400.0, 800.0),
             {"label": "same-comm-mix1", "case": "same-comm", "setting": "1", "status": "ok", "outcome": "ok"},
             {"label": "same-comm-mix0", "case": "same-comm", "setting": "0", "status": "hang", "outcome": "hang"}]
    summary = gm.summarize(pairs)
    v = summary["verdict"]
    assert v["mixing_cost"][4]["per_allreduce_us"] == pytest.approx((2005 - 800) / 122 - (1395 - 800) / 122)
    assert v["mixing_cost"][4]["per_step_us"] == pytest.approx(610.0)
    assert summary["table"]["1"][4]["step_us_rounds"] == [2000.0, 2010.0]
    assert v["ok"] and v["zero_safe_with_other_communicator"]
    assert v["same_comm_outcome"] == {"1": "ok", "0": "hang"}  # the unsupported case is reported, not failed
    assert gm.exit_code(summary) == 0
    assert any("hang" in line for line in v["text"])


def test_summary_wrong_and_hang_decide_the_exit_code():
    wrong = gm.summarize([_main_pair("1", 1, 2000.0, 800.0, wrong=3), _main_pair("0", 1, 1400.0, 800.0)])
    assert not wrong["verdict"]["ok"] and gm.exit_code(wrong) == gm.EXIT_FAILED
    hung = gm.summarize([_main_pair("1", 1, 2000.0, 800.0), _main_pair("0", 1, 1400.0, 800.0, safety_ok=None,
                                                                       status="hang")])
    assert hung["verdict"]["safety"]["0"] == ["hang"] and not hung["verdict"]["zero_safe_with_other_communicator"]
    assert gm.exit_code(hung) == gm.EXIT_HANG


@pytest.mark.stack
def test_watchdog_reports_a_sleeping_child_as_a_hang(tmp_path):
    cmds = [[sys.executable, "-c", "print('ok')"], [sys.executable, "-c", "import time; time.sleep(120)"]]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    t0 = time.monotonic()
    run = gm.run_bounded(cmds, {"PATH": "/usr/bin:/bin"}, logs, timeout_s=1.0)
    assert run["status"] == "hang" and run["codes"][0] == 0 and run["codes"][1] is None
    assert time.monotonic() - t0 < 15
    assert not gm._LIVE  # the sleeper was stopped


def _run_tool(*args, timeout=300):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


@pytest.mark.stack
def test_dry_run_on_cpu_builds_and_checks_the_step(tmp_path):
    proc = _run_tool("--dry-run", "--rows", "2", "--rounds", "1", "--layers", "8", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert [e["event"] for e in events] == ["start", "pair", "pair", "pair", "pair", "summary"]
    doc = json.loads((tmp_path / "graph_mixing.json").read_text())
    assert doc["versions"]["device"] == "cpu" and doc["verdict"]["wrong"] == 0
    main = [p for p in doc["pairs"] if p["case"] == "main"]
    assert [p["setting"] for p in main] == ["1", "0"]
    rank = main[0]["ranks"][0]
    assert rank["setting"] == "1" and rank["allreduces_per_step"] == 16
    assert rank["perf"]["2"]["wrong"] == 0 and rank["safety"]["steps"] == 20 and rank["safety"]["done"]
    assert (tmp_path / "logs" / "main-1-mix0-rank1.log").exists()


@pytest.mark.stack
def test_a_hung_rank_is_stopped_and_reported(tmp_path):
    proc = _run_tool("--dry-run", "--rows", "1", "--rounds", "1", "--layers", "2", "--same-comm-steps", "0",
                     "--test-hang", "main", "--pair-timeout-s", "20", "--out", str(tmp_path))
    assert proc.returncode == gm.EXIT_HANG, proc.stdout + proc.stderr
    hangs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith('{"event": "hang"')]
    assert len(hangs) == 2 and "sleeping" in hangs[0]["last_progress"]["1"]
    doc = json.loads((tmp_path / "graph_mixing.json").read_text())
    assert doc["verdict"]["hangs"] == ["main-1-mix1", "main-1-mix0"]
    assert doc["pairs"][0]["ranks"][0]["perf"]["1"]["wrong"] == 0  # measured before the hang, kept
