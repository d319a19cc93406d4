"""bench.predict (model, measured, cli): the verify cost model, its inputs from measured files, its input checks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.predict import cli as predict_cli
from bench.predict import model
from bench.predict.measured import load_allreduce_curves

REPO = Path(__file__).resolve().parents[3]


def run(argv: list[str], capsys) -> tuple[int, dict, str]:
    rc = predict_cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else {}), err


def test_design_numbers_122_allreduces_at_200us_plus_5ms(capsys):
    rc, data, _ = run(
        ["--compute-ms", "5", "--allreduces", "122", "--allreduce-us", "200", "--accept-len", "2"], capsys
    )
    assert rc == 0
    assert data["verify_ms"] == pytest.approx(29.4)
    assert data["spec_tokps"] == pytest.approx(2 / 29.4 * 1000, rel=1e-4)


def test_12ms_verify_at_accept_2_gives_167_tokps(capsys):
    rc, data, _ = run(["--verify-ms", "12", "--accept-len", "2.0"], capsys)
    assert rc == 0 and round(data["spec_tokps"], 1) == 166.7
    assert data["baseline_tokps"] is None and data["breakeven_accept_len"] is None


def test_breakeven_from_82_tokps_and_30ms_cycle(capsys):
    rc, data, _ = run(["--verify-ms", "30", "--accept-len", "2", "--baseline-tokps", "82"], capsys)
    assert rc == 0 and data["breakeven_accept_len"] == pytest.approx(2.46)
    assert data["speedup"] == pytest.approx((2 / 30 * 1000) / 82, rel=1e-3)
    rc, via_decode, _ = run(
        ["--verify-ms", "25", "--draft-ms", "5", "--accept-len", "2", "--decode-ms", str(1000 / 82)], capsys
    )
    assert via_decode["breakeven_accept_len"] == pytest.approx(2.46)
    assert via_decode["cycle_ms"] == pytest.approx(30.0)


def test_target_latency_and_impossible_target(capsys):
    base = ["--compute-ms", "5", "--allreduces", "122", "--allreduce-us", "200", "--accept-len", "2"]
    rc, data, _ = run([*base, "--target-tokps", "167"], capsys)
    needed = data["target"]["allreduce_us_needed"]
    assert needed == pytest.approx(((2000 / 167) - 5) * 1000 / 122, rel=1e-3)
    assert model.spec_tokps(2, 0, model.verify_ms(5, 122, needed)) == pytest.approx(167, rel=1e-3)
    rc, data, _ = run([*base, "--target-tokps", "500"], capsys)
    assert data["target"]["allreduce_us_needed"] is None
    assert "impossible even at 0 µs" in data["target"]["answer"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--verify-ms", "12"],  # no accept length
        ["--verify-ms", "12", "--compute-ms", "5", "--accept-len", "2"],  # both
        ["--compute-ms", "5", "--accept-len", "2"],  # compute without all-reduce count and latency
        ["--verify-ms", "-1", "--accept-len", "2"],
        ["--verify-ms", "12", "--accept-len", "2", "--baseline-tokps", "80", "--decode-ms", "12"],
        [
            "--compute-ms",
            "5",
            "--allreduces",
            "122",
            "--allreduce-json",
            "x.json",
            "--accept-len",
            "2",
        ],  # no --tokens
    ],
)
def test_bad_input_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse conflicts exit through SystemExit(2)
        raise SystemExit(predict_cli.main(argv))
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def _write_allreduce(path, rows):
    path.write_text(json.dumps(rows))
    return path


def _row(backend, size, p50, profile=None, status="ok"):
    return {
        "backend": backend,
        "profile": profile,
        "nranks": 8,
        "graph": True,
        "type": "bf16",
        "size_B": size,
        "time_us_p50": p50,
        "time_us_p99": p50 * 1.2,
        "status": status,
    }


def test_allreduce_json_interpolates_at_the_verify_size(tmp_path, capsys):
    path = _write_allreduce(
        tmp_path / "allreduce.json",
        [
            _row("nccl", 28672, 20.0),
            _row("nccl", 57344, 40.0),
            _row("nccl", 28672, 10.0, profile="nccl-tuned"),
            _row("nccl", 57344, 12.0, profile="nccl-tuned"),
            {
                "backend": "mscclpp",
                "profile": None,
                "nranks": 8,
                "graph": True,
                "type": "bf16",
                "status": "skipped",
                "reason": "x",
            },
        ],
    )
    rc, data, err = run(
        [
            "--compute-ms",
            "5",
            "--allreduces",
            "122",
            "--allreduce-json",
            str(path),
            "--tokens",
            "3",
            "--hidden",
            "7168",
            "--accept-len",
            "2",
            "--baseline-tokps",
            "82",
        ],
        capsys,
    )
    assert rc == 0, err
    by_label = {s["label"]: s for s in data["scenarios"]}
    frac = math.log(43008 / 28672) / math.log(2)
    expected = 20.0 * 2**frac  # linear in log-log between the two measured sizes
    default = by_label["nccl, 8 ranks, graph"]
    assert default["allreduce_us"] == pytest.approx(expected, rel=1e-3)
    assert default["verify_ms"] == pytest.approx(5 + 122 * expected / 1000, rel=1e-4)
    tuned = by_label["nccl [nccl-tuned], 8 ranks, graph"]
    assert tuned["verify_ms"] < default["verify_ms"]
    assert "interpolated 28672..57344 B" in default["allreduce_source"]
    curves = load_allreduce_curves(path)
    assert curves[0].at(1000)[0] == 20.0 and "below" in curves[0].at(1000)[1]


def test_allreduce_json_uses_the_nccl_tests_time_when_the_row_has_it(tmp_path):
    new = {**_row("nccl", 28672, 30.0), "time_us": 12.0}
    path = _write_allreduce(tmp_path / "ar.json", [new, _row("nccl", 57344, 40.0)])
    (curve,) = load_allreduce_curves(path)
    assert curve.points == ((28672, 12.0), (57344, 40.0))  # time_us first; p50 for a row from before it


def _bundle(tmp_path, entries):
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "manifest.json").write_text("{}")
    for name, body in entries.items():
        (d / f"{name}.json").write_text(json.dumps(body))
    return d


def _cell(profile, spec, tokps, accept, itl, valid=True):
    return {
        "profile": profile,
        "spec": spec,
        "valid": valid,
        "output_throughput": tokps,
        "accept_length": accept,
        "median_itl_ms": itl,
    }


def test_bundle_prediction_vs_measurement(tmp_path, capsys):
    d = _bundle(
        tmp_path,
        {
            "baseline__off": _cell("baseline", "off", 82.0, None, 12.2),
            "baseline__eagle3": _cell("baseline", "eagle3", 60.0, 2.0, 33.0),
            "broken__eagle3": _cell("broken", "eagle3", None, None, None, valid=False),
        },
    )
    rc, data, err = run(["--verify-ms", "30", "--bundle", str(d)], capsys)
    assert rc == 0, err
    assert data["bundle_baseline_tokps"] == 82.0
    rows = {r["profile"]: r for r in data["bundle"]}
    predicted = 2.0 / 30 * 1000
    assert rows["baseline"]["predicted_tokps"] == pytest.approx(predicted, rel=1e-4)
    assert rows["baseline"]["error_pct"] == pytest.approx((predicted - 60) / 60 * 100, abs=0.01)
    assert "invalid" in rows["broken"]["note"]
    # the baseline comes from baseline__off.json; no --accept-len means no headline tok/s
    assert data["breakeven_accept_len"] == pytest.approx(2.46)
    assert data["spec_tokps"] is None


def test_a_note_shared_by_the_rows_is_printed_once(tmp_path, capsys, monkeypatch):
    """Without a latency every row has the same "no verify model" note: a number in each row, the note once under
    the table, so 5 rows take 5 lines of table, not 8 wrapped lines each."""
    monkeypatch.setenv("COLUMNS", "120")
    cells = {f"{p}__eagle3": _cell(p, "eagle3", 60.0 + i, 2.37, 20.0) for i, p in
             enumerate(("baseline", "custom-ar", "ep", "fused", "nccl-tuned"))}
    d = _bundle(tmp_path, {"baseline__off": _cell("baseline", "off", 82.0, None, 12.2),
                           "broken__eagle3": _cell("broken", "eagle3", None, None, None, valid=False), **cells})
    assert predict_cli.main(["--bundle", str(d)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 6, "\n".join(lines)  # one line per row: nothing wraps
    assert sum(line.rstrip().endswith("│  [1] │") for line in rows) == 5 and rows[1].rstrip().endswith("│  [2] │")
    notes = [line for line in lines if line.startswith("[")]
    assert notes == ["[1] no verify model: give --verify-ms, or --compute-ms with --allreduces and latency",
                     "[2] invalid run: not compared"]
    assert len(lines) <= 18, "\n".join(lines)


@pytest.mark.stack
def test_a_simulated_bundle_marks_the_prediction_and_breakeven_refuses_it(tmp_path, capsys):
    d = _bundle(tmp_path, {"baseline__off": _cell("baseline", "off", 82.0, None, 12.2),
                           "baseline__eagle3": _cell("baseline", "eagle3", 60.0, 2.0, 33.0)})
    (d / "manifest.json").write_text(json.dumps({"simulated": True}))
    rc, data, err = run(["--verify-ms", "30", "--bundle", str(d)], capsys)
    assert rc == 0 and data["simulated"] is True, err
    assert predict_cli.main(["--verify-ms", "30", "--bundle", str(d)]) == 0
    assert "SIMULATED: the bundle was measured on the stand-in server" in capsys.readouterr().out
    result = tmp_path / "predict.json"
    result.write_text(json.dumps(data))
    rules = tmp_path / "breakeven.yml"
    tool = [sys.executable, str(REPO / "docker" / "monitoring" / "breakeven.py"), "--profile", "baseline", str(result),
            "--out", str(rules)]
    refused = subprocess.run(tool, capture_output=True, text=True)
    assert refused.returncode == 2 and "SIMULATED" in refused.stderr and not rules.exists(), refused.stderr
    demo = subprocess.run([*tool, "--allow-simulated"], capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr
    assert "# SIMULATED (a demo, not a production threshold)" in rules.read_text()


def test_bundle_with_missing_keys_names_the_file(tmp_path, capsys):
    d = _bundle(tmp_path, {"x__eagle3": {"profile": "x", "spec": "eagle3"}})
    rc = predict_cli.main(["--verify-ms", "30", "--bundle", str(d)])
    err = capsys.readouterr().err
    assert rc == 2 and "x__eagle3.json" in err and "output_throughput" in err


def test_temperature_adds_exactly_three_broadcasts_to_the_verify(capsys):
    base = ["--compute-ms", "5", "--allreduce-us", "200", "--accept-len", "2", "--baseline-tokps", "82"]
    _, greedy, _ = run(base, capsys)
    _, hot, _ = run([*base, "--temperature", "0.7"], capsys)
    assert greedy["collectives"]["verify"] == 0 and hot["collectives"]["broadcasts"] == 3
    assert hot["verify_ms"] - greedy["verify_ms"] == pytest.approx(3 * 200 / 1000)  # at the all-reduce latency
    assert hot["decode_collectives_ms"] == greedy["decode_collectives_ms"] == pytest.approx(124 * 200 / 1000)
    assert (greedy["verify_collectives_ms"], hot["verify_collectives_ms"]) == (0.0, pytest.approx(0.6))
    _, priced, _ = run([*base, "--temperature", "0.7", "--broadcast-us", "350"], capsys)
    assert priced["verify_ms"] - greedy["verify_ms"] == pytest.approx(3 * 350 / 1000)
    assert priced["verify_collectives_ms"] == pytest.approx(3 * 350 / 1000)
    assert predict_cli.main([*base, "--temperature", "0.7"]) == 0  # the table prints both parts
    out = " ".join(capsys.readouterr().out.split())
    assert "124 decode, 3 verify" in out and "0.60" in out  # the verify collectives' ms in the table
    # the target latency leaves room for the broadcasts too
    _, target, _ = run([*base, "--temperature", "0.7", "--target-tokps", "167"], capsys)
    needed = target["target"]["allreduce_us_needed"]
    assert model.verify_ms(5, 124, needed, broadcasts=3) == pytest.approx(2000 / 167, rel=1e-4)


def test_the_collective_count_follows_the_models_layers(tmp_path, capsys):
    base = ["--compute-ms", "5", "--allreduce-us", "100", "--accept-len", "2"]
    _, default, _ = run(base, capsys)
    assert default["collectives"]["layers"] == 61 and default["collectives"]["decode"] == 1 + 2 * 61 + 1
    _, small, _ = run([*base, "--layers", "27"], capsys)
    assert small["collectives"]["allreduces"] == 1 + 2 * 27 and small["collectives"]["allgathers"] == 1
    assert small["verify_ms"] == pytest.approx(5 + (1 + 2 * 27 + 1) * 100 / 1000)
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 40}}))
    _, path, _ = run([*base, "--model-path", str(tmp_path), "--model-overlay", "kimi-k2"], capsys)
    assert path["collectives"]["layers"] == 40 and "config.json" in path["collectives"]["layers_source"]
    _, overlay, _ = run([*base, "--model-overlay", "deepseek-v3"], capsys)
    assert overlay["collectives"]["layers_source"] == "model overlay deepseek-v3"
    _, given, _ = run([*base, "--allreduces", "122"], capsys)  # an explicit count still wins
    assert given["collectives"]["decode_used"] == 122 and given["verify_ms"] == pytest.approx(5 + 12.2)
    c = model.step_collectives(10, 0.0)
    assert (c.decode, c.verify) == (22, 0) and model.step_collectives(10, 1.0, tp=1).decode == 0


@pytest.mark.parametrize("argv", [["--temperature", "-0.5"], ["--layers", "0"], ["--broadcast-us", "-1"]])
def test_bad_collective_inputs_exit_2(argv, capsys):
    assert predict_cli.main(["--compute-ms", "5", "--allreduce-us", "100", "--accept-len", "2", *argv]) == 2
    assert "Traceback" not in capsys.readouterr().err
