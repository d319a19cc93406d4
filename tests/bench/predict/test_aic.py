"""`bench predict --aic` (bench/predict/aic.py, aic_probe.py) against a fake AIConfigurator.

tests/fixtures/fake_aic/ answers like the real package (cli_estimate, its systems/ data layout); the
probe runs under this Python with that folder on PYTHONPATH, as it runs under `make aic`'s venv.
Without it on PYTHONPATH this Python has no aiconfigurator: the missing-package path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.predict import aic
from bench.predict.cli import main as predict_main
from bench.predict.measured import AllreduceCurve
from launcher.errors import RuntimeFailure, UserError

FAKE = Path(__file__).resolve().parents[2] / "fixtures" / "fake_aic"
ENV = {"KIT_AIC_PYTHON": sys.executable, "PYTHONPATH": str(FAKE)}


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


@pytest.mark.stack
def test_probe_answer_is_parsed_from_the_fake_package() -> None:
    est = aic.ask(aic.request("moonshotai/Kimi-K2.5", tokens=4, hidden=7168), environ=ENV)
    assert (est.version, est.model, est.system, est.backend, est.backend_version) == (
        "0.0.0-fake", "moonshotai/Kimi-K2.5", "rtx_pro_6000_server", "sglang", "0.5.14")
    assert (est.decode_ms, est.spec_step_ms, est.nextn) == (10.0, 13.0, 3)
    assert est.ratio == pytest.approx(1.3)
    assert est.allreduce.nccl_version == "2.29.2"
    assert est.allreduce.system_file is not None and est.allreduce.system_file.endswith("aiconfigurator_core/systems/rtx_pro_6000_server.yaml")
    # message sizes in elements, linear between the two nearest rows (invented: 20 µs at 4096, 22 at 8192)
    assert aic.table_us(est, "nccl", 8, 7168) == pytest.approx(21.5)
    assert aic.table_us(est, "nccl", 8, 4 * 7168) == pytest.approx(27.0)
    assert aic.table_us(est, "sglang_graph", 8, 7168) == pytest.approx(18.75)
    assert aic.table_us(est, "nccl", 2, 7168) == pytest.approx(11.5)
    assert aic.table_us(est, "nccl", 4, 7168) is None  # no 4-GPU rows in the fake


@pytest.mark.stack
def test_probe_outside_the_table_uses_the_nearest_row_and_says_so() -> None:
    est = aic.ask({**aic.request("m", tokens=1, hidden=1024), "elements": [1024, 65536]}, environ=ENV)
    nccl = next(t for t in est.allreduce.tables if t.label == "nccl")
    low, high = nccl.gpus["8"]
    assert (low.us, high.us) == (pytest.approx(20.0), pytest.approx(28.0))
    assert "below the table" in low.how and "above the table" in high.how


@pytest.mark.parametrize(("kit", "aic_", "ratio", "verdict"), [
    (12.2, 9.78, 1.247, "agree"),
    (29.4, 12.13, 2.424, "disagree: kit higher"),
    (5.0, 10.0, 0.5, "disagree: kit lower"),
    (8.0, 10.0, 0.8, "agree"),
    (None, 10.0, None, "kit has no figure"),
])
def test_disagreement_ratio(kit: float | None, aic_: float, ratio: float | None, verdict: str) -> None:
    row = aic.ratio_row("x", kit, aic_)
    assert row.ratio == (None if ratio is None else pytest.approx(ratio, abs=1e-3))
    assert row.verdict == verdict


@pytest.mark.stack
def test_second_opinion_sets_kit_beside_aic_with_measured_curves() -> None:
    est = aic.ask(aic.request("moonshotai/Kimi-K2.5", tokens=4, hidden=7168), environ=ENV)
    curve = AllreduceCurve(backend="nccl", profile=None, nranks=8, graph=True, dtype="bf16",
                           points=((14336, 43.0), (57344, 54.0)))
    op = aic.second_opinion(est, model_source="--model-overlay kimi-k2", tokens=4, hidden=7168,
                            kit_decode_ms=12.2, kit_verify_ms=29.4, kit_cycle_ms=30.4, kit_allreduce_us=None,
                            curves=[curve]).to_json()
    steps = {r["what"].split(" (")[0]: r for r in op["steps"]}
    assert steps["decode step ms"]["ratio"] == pytest.approx(1.22)
    assert steps["verify / decode"]["kit"] == pytest.approx(29.4 / 12.2, abs=1e-4)
    assert steps["verify / decode"]["aic"] == pytest.approx(1.3)
    decode, verify = op["allreduce"]
    assert (decode["size_B"], decode["kit_us"], decode["aic_nccl_us"]) == (14336, 43.0, pytest.approx(21.5))
    assert decode["vs_nccl"]["ratio"] == pytest.approx(2.0)
    assert (verify["size_B"], verify["kit_us"], verify["aic_nccl_us"]) == (57344, 54.0, pytest.approx(27.0))
    assert op["disagree"] == ["verify ms (AIC: 3-draft MTP step)", "cycle ms, draft + verify (AIC: 3-draft MTP step)",
                              "verify / decode", "all-reduce decode (nccl, 8 ranks, graph (measured))",
                              "all-reduce verify (nccl, 8 ranks, graph (measured))"]


@pytest.mark.stack
def test_bench_predict_aic_prints_both_and_json(fake_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    rc = predict_main(["--aic", "--model-overlay", "kimi-k2", "--compute-ms", "5", "--allreduce-us", "200",
                       "--accept-len", "2", "--decode-ms", "12.2", "--tokens", "4", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)["aic"]
    assert (out["model"], out["model_source"]) == ("moonshotai/Kimi-K2.5", "--model-overlay kimi-k2")
    assert (out["decode_ms"], out["spec_step_ms"], out["verify_over_decode"]) == (10.0, 13.0, 1.3)
    assert [a["kit"] for a in out["allreduce"]] == ["--allreduce-us", "--allreduce-us"]
    assert out["allreduce"][0]["vs_nccl"]["ratio"] == pytest.approx(200 / 21.5, abs=1e-3)
    rc = predict_main(["--aic", "--model-overlay", "kimi-k2", "--decode-ms", "12.2"])
    text = capsys.readouterr().out
    assert rc == 0 and "AIConfigurator 0.0.0-fake" in text and "agree within 0.8..1.25" in text


@pytest.mark.stack
def test_aic_alone_needs_no_kit_inputs(fake_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert predict_main(["--aic", "--aic-model", "deepseek-ai/DeepSeek-V3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["aic"]
    assert out["model_source"] == "--aic-model"
    assert out["steps"][0]["verdict"] == "kit has no figure"
    assert out["allreduce"][0]["kit"] is None


@pytest.mark.stack
def test_missing_package_is_exit_2_naming_the_install(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KIT_AIC_PYTHON", sys.executable)  # the kit's Python: no aiconfigurator
    monkeypatch.delenv("PYTHONPATH", raising=False)
    rc = predict_main(["--aic", "--model-overlay", "kimi-k2", "--decode-ms", "12.2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "make aic" in err and "KIT_AIC_PYTHON" in err and "Traceback" not in err


@pytest.mark.stack
def test_python_that_does_not_exist_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(aic.AicMissing, match="make aic"):
        aic.ask(aic.request("m", tokens=4, hidden=7168), environ={"KIT_AIC_PYTHON": str(tmp_path / "nope")})


def test_default_python_is_the_aic_venv_then_this_one(tmp_path: Path) -> None:
    assert aic.find_python({}, tmp_path)[0] == [sys.executable]
    venv_python = tmp_path / ".venv-aic" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("")
    assert aic.find_python({}, tmp_path)[0] == [str(venv_python), sys.executable]
    assert aic.find_python({"KIT_AIC_PYTHON": "/x/python"}, tmp_path) == (["/x/python"], "KIT_AIC_PYTHON")


@pytest.mark.stack
def test_estimate_failure_is_named() -> None:
    with pytest.raises(UserError, match="failed: estimate: ValueError: model fake/unsupported is not supported"):
        aic.ask(aic.request("fake/unsupported", tokens=4, hidden=7168), environ=ENV)


def test_answer_without_a_figure_is_refused() -> None:
    with pytest.raises(RuntimeFailure, match="no positive decode_ms"):
        aic.parse({"decode_ms": 0, "spec_step_ms": 1.0, "allreduce": {"tables": []}})
    with pytest.raises(RuntimeFailure, match="no all-reduce tables"):
        aic.parse({"decode_ms": 1.0, "spec_step_ms": 1.0})
    with pytest.raises(RuntimeFailure, match="no draft count"):
        aic.parse({"decode_ms": 1.0, "spec_step_ms": 1.0, "nextn": "three", "allreduce": {"tables": []}})


def test_model_mapping() -> None:
    assert aic.resolve_model(aic_model=None, model_path=None, overlay="kimi-k2") == (
        "moonshotai/Kimi-K2.5", "--model-overlay kimi-k2")
    assert aic.resolve_model(aic_model=None, model_path=None, overlay=None, environ={"MODEL_OVERLAY": "deepseek-v3"}) \
        == ("deepseek-ai/DeepSeek-V3", "MODEL_OVERLAY deepseek-v3")
    assert aic.resolve_model(aic_model="x/y", model_path=None, overlay="kimi-k2") == ("x/y", "--aic-model")
    with pytest.raises(UserError, match="model overlay 'mine' has no AIConfigurator model.*--aic-model"):
        aic.resolve_model(aic_model=None, model_path=None, overlay="mine")
    with pytest.raises(UserError, match="no model overlay is named"):
        aic.resolve_model(aic_model=None, model_path=None, overlay=None, environ={})


def test_model_path_with_config_is_asked_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert aic.resolve_model(aic_model=None, model_path=str(tmp_path), overlay="kimi-k2") == (
        str(tmp_path), "--model-path")
    assert aic.resolve_model(aic_model=None, model_path=str(tmp_path / "absent"), overlay="kimi-k2")[0] == \
        "moonshotai/Kimi-K2.5"
