"""EAGLE-3 speculation parameters (steps, topk, draft_tokens) as part of a plan, end to end:
plan/show/check, a real switch through the control API, `bench run --eagle3`, bundles, the stand-in."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from helpers_profiles import ENV, clean_env

from bench.bundle import store as bundle
from bench.report import deltas as compare_deltas
from bench.report import render as report
from launcher.cli import main as launcher_main
from launcher.errors import UserError
from launcher.profiles import spec_params
from launcher.profiles.plan import Plan, build_plan
from testsupport.stack import REPO, standin_stack
from testsupport.standin.settings import StandinSettings
from testsupport.standin.simulation import eagle_point_figures, effective_accept_length, verify_interval_ms

POINT = {"steps": 1, "topk": 1, "draft_tokens": 2}


@pytest.fixture
def env(monkeypatch):
    clean_env(monkeypatch)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


# ---- the plan -------------------------------------------------------------------------------------


def test_plan_carries_the_overlay_point_and_none_without_eagle(env):
    assert build_plan("fused", "eagle3").spec_params == spec_params.SpecParams(steps=3, topk=1, draft_tokens=4)
    assert build_plan("fused", "off").spec_params is None
    assert build_plan("fused", "ngram").spec_params is None


def test_point_replaces_the_overlay_flags_and_changes_both_digests(env):
    plain = build_plan("fused", "eagle3", use_parser=True)
    point = build_plan("fused", "eagle3", use_parser=True, spec_params=POINT)  # SGLang's parser took it
    assert point.spec_params.model_dump() == POINT and point.to_json()["spec_params"] == POINT
    i = point.flags.index("--speculative-num-steps")
    assert point.flags[i:i + 6] == ["--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                                    "--speculative-num-draft-tokens", "2"]
    assert point.flags.count("--speculative-num-steps") == 1 and len(point.flags) == len(plain.flags)
    assert point.digest() != plain.digest() and point.setup_digest() != plain.setup_digest()
    same = build_plan("fused", "eagle3", spec_params="3,1,4")  # the overlay's own point is the same plan
    assert same.digest() == plain.digest() and same.setup_digest() == plain.setup_digest()
    # a stored plan from before points reads its point off its flags
    stored = point.to_json()
    stored.pop("spec_params")
    assert Plan.from_json(stored).spec_params.model_dump() == POINT


@pytest.mark.parametrize("spec", ["off", "ngram"])
def test_point_for_a_non_eagle_spec_is_refused_naming_it(env, spec):
    with pytest.raises(UserError, match=rf"spec_params \(1,1,2\) apply to EAGLE-3 only.*'{spec}'"):
        build_plan("fused", spec, spec_params=POINT)


@pytest.mark.parametrize("point, words", [
    ("3,1,5", r"replaces draft tokens by steps \+ 1 = 4"),
    ("2,4,40", "draft tree holds 20 candidates"),
])
def test_points_sglang_would_not_run_as_given_are_refused(env, point, words):
    with pytest.raises(UserError, match=words):
        build_plan("fused", "eagle3", spec_params=point)


def test_tree_points_pass_and_topk_over_1_needs_a_tree_backend(env, tmp_path, monkeypatch):
    assert build_plan("fused", "eagle3", spec_params="5,4,8", use_parser=True).spec_params.topk == 4
    root = tmp_path / "user"
    root.mkdir()
    (root / "t.toml").write_text('extends = "baseline"\ndescription = "t"\n[server]\nattention-backend = "trtllm_mha"\n')
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
    with pytest.raises(UserError, match="trtllm_mha attention backend only supports top-k 1"):
        build_plan("t", "eagle3", spec_params="5,4,8")
    assert build_plan("t", "eagle3", spec_params="1,1,2").spec_params.steps == 1


@pytest.mark.parametrize("text", ["1,1", "0,1,1", "1,1,x", "1,1,2,3", "-1,1,0", "2000,1,2001", ""])
def test_malformed_points_name_the_flag(text):
    with pytest.raises(UserError, match="--spec-params"):
        spec_params.parse(text)


def test_every_launcher_command_declares_spec_params_once(capsys):
    """`launcher show/check` and `launcher switch` (control_cli) take --spec-params from the one declaration."""
    from launcher.runtime.api import control_cli

    for main, argv in ((launcher_main, ["show", "--help"]), (launcher_main, ["check", "--help"]),
                       (control_cli.main, ["switch", "--help"])):
        with pytest.raises(SystemExit):
            main(argv)
        shown = " ".join(capsys.readouterr().out.split())
        assert f"{spec_params.FLAG} {spec_params.METAVAR}" in shown and spec_params.HELP in shown, argv
    parser = argparse.ArgumentParser()
    spec_params.add_argument(parser)
    assert parser.parse_args([]).spec_params is None and parser.parse_args(["--spec-params", "1,1,2"]).spec_params == "1,1,2"


def test_show_and_check_take_spec_params(env, capsys):
    assert launcher_main(["show", "fused", "--spec-params", "1,1,2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spec_params"] == POINT and "--speculative-num-draft-tokens" in shown["flags"]
    assert launcher_main(["show", "fused", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["spec_params"] == {"steps": 3, "topk": 1, "draft_tokens": 4}
    assert shown["digest"] != plain["digest"] and shown["setup_digest"] != plain["setup_digest"]
    assert launcher_main(["show", "fused", "--spec-params", "1,1,2"]) == 0
    assert "# spec params: steps 1, topk 1, draft tokens 2" in capsys.readouterr().out

    assert launcher_main(["check", "fused", "--spec-params", "1,1,2"]) == 0
    out = capsys.readouterr().out
    assert "ok    fused + eagle3" in out and "at spec params 1,1,2" in out
    assert launcher_main(["check", "fused", "--spec-params", "3,1,5"]) == 2  # refused at the flag, as everywhere
    assert "--spec-params '3,1,5': (3,1,5): with top-k 1 SGLang replaces draft tokens" in capsys.readouterr().err
    for argv in (["show", "fused", "--spec", "ngram", "--spec-params", "1,1,2"],
                 ["check", "fused", "--spec", "off", "--spec-params", "1,1,2"],
                 ["show", "fused", "--spec-params", "1,1"]):
        assert launcher_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "spec_params (1,1,2)" in err or "--spec-params '1,1'" in err


# ---- the stand-in ---------------------------------------------------------------------------------


def test_standin_models_the_point_and_keeps_the_reference_figures():
    s = StandinSettings()
    assert eagle_point_figures(s.verify_ms, s.accept_length, (3, 1, 4)) == (s.verify_ms, s.accept_length)
    assert effective_accept_length(s, True, (3, 1, 4)) == s.accept_length and verify_interval_ms(s, None) == s.verify_ms
    rate = {}
    for steps in range(1, 8):
        verify, accept = eagle_point_figures(s.verify_ms, s.accept_length, (steps, 1, steps + 1))
        rate[steps] = accept / verify
        if steps > 1:
            prev_verify, prev_accept = eagle_point_figures(s.verify_ms, s.accept_length, (steps - 1, 1, steps))
            assert verify > prev_verify and accept > prev_accept  # cost and acceptance both grow
    best = max(rate, key=rate.get)
    assert best < 7 and rate[1] > rate[3] > rate[7]  # the optimum is not the largest point
    assert eagle_point_figures(s.verify_ms, s.accept_length, (50, 1, 51))[1] < 1 + (s.accept_length - 1) / (1 - 0.6 ** 3) + 1e-9


# ---- a real switch and bench run through the control API ------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with standin_stack(tmp_path_factory.mktemp("spec-params-stack"), {"default": {"ttft_ms": 5, "decode_ms": 3, "verify_ms": 20, "accept_length": 2.0}}) as s:
        yield s


@pytest.mark.stack
def test_switch_with_spec_params_reaches_plan_status_and_history(stack):
    import httpx

    r = stack.switch("baseline", "eagle3", spec_params=POINT)
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "switched" and r.json()["to"]["spec_params"] == POINT
    plan = httpx.get(f"{stack.control_url}/plan", timeout=5).json()["plan"]
    assert plan["spec_params"] == POINT
    assert plan["argv"][plan["argv"].index("--speculative-num-steps") + 1] == "1"
    st = stack.status()
    assert st["spec_params"] == POINT and st["history"][-1]["to"]["spec_params"] == POINT
    info = httpx.get(f"{stack.server_url}/server_info", timeout=5).json()
    assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (1, 2)

    assert stack.switch("baseline", "eagle3", spec_params=POINT).json()["outcome"] == "unchanged"
    other = stack.switch("baseline", "eagle3", spec_params={"steps": 2, "topk": 1, "draft_tokens": 3})
    assert other.json()["outcome"] == "switched", other.text  # another point is a real switch
    assert stack.status()["spec_params"] == {"steps": 2, "topk": 1, "draft_tokens": 3}


@pytest.mark.stack
@pytest.mark.parametrize("spec, body, words", [
    ("ngram", POINT, "apply to EAGLE-3 only"),
    ("off", POINT, "apply to EAGLE-3 only"),
    ("eagle3", {"steps": 3, "topk": 1, "draft_tokens": 5}, "replaces draft tokens"),
    ("eagle3", {"steps": 0, "topk": 1, "draft_tokens": 1}, "spec_params.steps"),
    ("eagle3", {"steps": "1", "topk": 1, "draft_tokens": 2}, "spec_params.steps"),
    ("eagle3", {"steps": 1.0, "topk": 1, "draft_tokens": 2}, "spec_params.steps"),
    ("eagle3", {"steps": 1, "topk": 1}, "spec_params.draft_tokens"),
    ("eagle3", {"steps": 1, "topk": 1, "draft_tokens": 2, "width": 3}, "spec_params.width"),
    ("eagle3", [1, 1, 2], "spec_params"),
])
def test_bad_points_are_http_400_with_nothing_switched(stack, spec, body, words):
    before = stack.status()
    r = stack.switch("baseline", spec, spec_params=body)
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]
    after = stack.status()
    assert after["history"] == before["history"] and after["digest"] == before["digest"]


@pytest.mark.stack
def test_launcher_switch_takes_spec_params(stack):
    def cli(*args):
        env = {**stack.env, "KIT_CONTROL_URL": stack.control_url}
        return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    bad = cli("switch", "baseline", "--spec", "ngram", "--spec-params", "1,1,2")
    assert bad.returncode == 2 and "apply to EAGLE-3 only" in bad.stderr
    ok = cli("switch", "baseline", "--spec", "eagle3", "--spec-params", "1,1,2")
    assert ok.returncode == 0, ok.stderr
    assert "baseline + eagle3(1,1,2)" in ok.stdout
    assert "eagle3(1,1,2)" in cli("status").stdout


def _bench(stack, *args):
    return subprocess.run(
        [sys.executable, "-m", "bench.run.cli", "--url", stack.server_url, "--control", stack.control_url, *args],
        # 3 prompts x 48 tokens, under the gate's default minimum of 200: these tests look at the cells, not the gate
        cwd=REPO, env={**stack.env, "KIT_GATE_MIN_TOKENS": "32"}, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.stack
def test_bench_run_two_eagle3_points_are_two_cells(stack, tmp_path):
    r = _bench(stack, "--profiles", "baseline", "--spec", "off", "--eagle3", "1,1,2;7,1,8", "--repeats", "1",
               "--num-prompts", "3", "--max-tokens", "48", "--warmup", "0", "--ignore-eos", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "baseline+eagle3(1,1,2)" in r.stderr and "baseline+eagle3(7,1,8)" in r.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest, cells = bundle.load(run_dir)
    written = json.loads((run_dir / "manifest.json").read_text())  # what the manifest model does not read
    assert manifest.matrix == ["baseline__off", "baseline__eagle3__1-1-2", "baseline__eagle3__7-1-8"]
    assert written["settings"]["eagle3"] == [POINT, {"steps": 7, "topk": 1, "draft_tokens": 8}]
    by = {c.label: c for c in cells}
    assert set(by) == {"baseline+off", "baseline+eagle3(1,1,2)", "baseline+eagle3(7,1,8)"}
    small, large = by["baseline+eagle3(1,1,2)"], by["baseline+eagle3(7,1,8)"]
    for c, point in ((small, POINT), (large, {"steps": 7, "topk": 1, "draft_tokens": 8})):
        assert c.valid, c.invalid_reason
        assert c.spec_params.model_dump() == point and c.plan_spec_params is not None and c.plan_spec_params.model_dump() == point
        assert written["plans"][c.key]["spec_params"] == point
        assert (run_dir / f"{c.key}.requests.jsonl").is_file()
    assert small.plan_digest != large.plan_digest
    # the stand-in's model: (1,1,2) verifies faster and accepts fewer tokens than (7,1,8); faster overall
    assert small.first_level().value("accept_length") < large.first_level().value("accept_length")
    assert small.first_level().mean("output_throughput") > 1.2 * large.first_level().mean("output_throughput")
    rows = report.rows(manifest, cells)
    assert [row.spec for row in rows] == ["off", "eagle3(1,1,2)", "eagle3(7,1,8)"]
    assert "| baseline | eagle3(1,1,2) |" in (run_dir / "summary.md").read_text()

    # compare keeps cells apart by point: a bundle against itself matches each cell with itself only
    deltas = compare_deltas.deltas(cells, cells)
    assert {(d.profile, d.spec) for d in deltas} == {("baseline", "off"), ("baseline", "eagle3(1,1,2)"),
                                                          ("baseline", "eagle3(7,1,8)")}
    assert all(d.delta in (0.0, None) for d in deltas)


@pytest.mark.stack
def test_bench_run_bad_points_exit_2_before_any_switch(stack, tmp_path):
    before = stack.status()
    for point, words in (("3,1,5", "replaces draft tokens"), ("1,1", "--eagle3 '1,1'")):
        r = _bench(stack, "--profiles", "baseline", "--spec", "off", "--eagle3", point, "--out", str(tmp_path))
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    r = _bench(stack, "--no-switch", "--eagle3", "1,1,2", "--out", str(tmp_path))
    assert r.returncode == 2 and "drop --no-switch" in r.stderr
    after = stack.status()
    assert after["history"] == before["history"] and list(tmp_path.iterdir()) == []


def test_old_bundle_cells_without_spec_params_still_load(tmp_path):
    cell = {"profile": "fused", "spec": "eagle3", "valid": True, "by_concurrency": {}}
    (tmp_path / "manifest.json").write_text(json.dumps({"matrix": ["fused__eagle3"]}))
    (tmp_path / "fused__eagle3.json").write_text(json.dumps(cell))
    _, cells = bundle.load(tmp_path)
    assert cells[0].label == "fused+eagle3" and cells[0].key == "fused__eagle3"
    (tmp_path / "fused__eagle3.json").write_text(json.dumps({**cell, "spec_params": {"steps": 0, "topk": 1, "draft_tokens": 1}}))
    with pytest.raises(UserError, match="spec_params"):
        bundle.load(tmp_path)
