"""bench/tune/profile_out.py: the winner as a user profile that `launcher check` accepts."""

from __future__ import annotations

import json
import tomllib

import pytest
from helpers_profiles import child_env, run_launcher

from bench.tune.profile_out import Evidence, host_summary, render
from bench.tune.space import Candidate
from launcher.errors import UserError
from launcher.profiles.spec_params import SpecParams

HOST = {"available": True, "gpus": [{"name": "NVIDIA RTX PRO 6000\nextends = \"evil\""}] * 8,
        "driver": "580.65", "interconnect": "pcie-switch", "nccl": "2.27.3"}
EVIDENCE = Evidence(bundle="results/tune/20250101T000000Z-ab12", date="2025-01-01T00:00:00Z",
                    figures={"tok/s": "95.2 ± 0.3 (n=8)", "vs running plan": "+12.9 [+11.8, +14.0]"},
                    host=HOST, decision="winner: beats fused+eagle3(3,1,4) and baseline+off")
WINNER = Candidate("fused", "eagle3", SpecParams(steps=2, topk=1, draft_tokens=3))


def test_render_extends_pins_and_keeps_evidence_in_comments():
    text = render("tuned", WINNER, EVIDENCE)
    data = tomllib.loads(text)
    assert data["extends"] == "fused" and data["status"] == "experimental"
    assert data["spec_params"] == {"steps": 2, "topk": 1, "draft_tokens": 3}
    assert "server" not in data
    comments = [line for line in text.splitlines() if line.startswith("#")]
    joined = "\n".join(comments)
    for needle in ("results/tune/20250101T000000Z-ab12", "2025-01-01", "95.2 ± 0.3", "8x NVIDIA RTX PRO 6000",
                   "580.65", "pcie-switch", "NCCL 2.27.3", "fused+eagle3(2,1,3)", "--spec eagle3"):
        assert needle in joined
    # a hostile GPU name stays inside its comment
    assert set(data) == {"extends", "description", "status", "spec_params"}


def test_the_pinned_table_is_the_profile_formats_own():
    from launcher.profiles.loader import ProfileFile

    pf = ProfileFile.model_validate(tomllib.loads(render("tuned", WINNER, EVIDENCE)))
    assert pf.spec_params == SpecParams(steps=2, topk=1, draft_tokens=3)


def test_off_winner_has_no_spec_params_table_and_bad_names_refuse():
    data = tomllib.loads(render("tuned-off", Candidate("baseline", "off"), EVIDENCE))
    assert "spec_params" not in data and "server" not in data and data["extends"] == "baseline"
    with pytest.raises(UserError):
        render("../x", WINNER, EVIDENCE)
    assert host_summary({}) == "unknown"
    assert host_summary({"available": False, "reason": "no nvidia-smi"}) == "unavailable (no nvidia-smi)"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-profiles")
    (folder / "tuned.toml").write_text(render("tuned", WINNER, EVIDENCE), encoding="utf-8")
    return folder


@pytest.mark.stack
def test_the_rendered_profile_passes_launcher_check(written):
    r = run_launcher("check", "tuned", env=child_env(KIT_PROFILES_DIR=str(written)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok    tuned + eagle3 at spec params 2,1,3" in r.stdout and "0 invalid" in r.stdout
    assert "belongs to the spec overlay" not in r.stdout + r.stderr
    assert "ok    tuned + off" in r.stdout and "ok    tuned + ngram" in r.stdout


@pytest.mark.stack
def test_the_pins_reach_the_command_line_under_spec_eagle3(written):
    env = child_env(KIT_PROFILES_DIR=str(written))
    r = run_launcher("show", "tuned", "--spec", "eagle3", "--json", env=env)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    flags = plan["flags"]
    at = flags.index("--speculative-num-steps")
    assert flags[at:at + 6] == ["--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                                "--speculative-num-draft-tokens", "3"]
    assert flags.count("--speculative-num-steps") == 1
    assert plan["spec_params"] == {"steps": 2, "topk": 1, "draft_tokens": 3}
    assert plan["spec_params_from"] == str(written / "tuned.toml")
    r = run_launcher("show", "tuned", "--spec", "eagle3", env=env)
    assert r.returncode == 0, r.stderr
    assert f"# spec params: steps 2, topk 1, draft tokens 3 (the profile's [spec_params], {written / 'tuned.toml'})" \
        in r.stdout
    off = run_launcher("show", "tuned", "--spec", "off", "--json", env=env)
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout)["spec_params"] is None and "spec_params_from" not in json.loads(off.stdout)
