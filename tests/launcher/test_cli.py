"""`python -m launcher` as a user runs it: real subprocesses, exit codes, messages, files."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from helpers_profiles import BUILTIN, child_env, profile_toml, run_launcher, write_profiles

PROFILE_NAMES = sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base")
SPEC_MODES = sorted(p.stem for p in (BUILTIN / "spec").glob("*.toml"))
MODEL_OVERLAYS = sorted(p.stem for p in (BUILTIN / "model").glob("*.toml"))


def assert_user_error(proc, *needles: str) -> None:
    """Exit 2, one `error:` line on stderr naming every needle, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def bad_user_dir(tmp_path) -> Path:
    return write_profiles(
        tmp_path / "user",
        {
            "broken.toml": 'description = "x"\n[env]\nNCCL_ALGO = "Ring"\nNCCL_PROTO = \n',
            "abbrev.toml": profile_toml("abbreviated flag", extends="nccl-tuned", server={"tp": 8}),
            "tree.toml": profile_toml("tree", extends="nccl-tuned", env={"NCCL_ALGO": "Tree"}),
        },
    )


# ---- profiles -----------------------------------------------------------------------------------


@pytest.mark.stack
def test_profiles_json_lists_every_profile():
    proc = run_launcher("profiles", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == PROFILE_NAMES
    for row in rows:
        raw = tomllib.loads((BUILTIN / f"{row['name']}.toml").read_text())
        assert row["description"] == raw["description"]
        assert row["status"] == raw["status"] and row["status"] in ("stable", "experimental")


@pytest.mark.stack
def test_profiles_text_has_one_line_per_profile():
    proc = run_launcher("profiles")
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == PROFILE_NAMES


# ---- show ---------------------------------------------------------------------------------------


@pytest.mark.stack
def test_show_json_has_the_contract_keys():
    proc = run_launcher("show", "fused", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"name", "env", "argv", "patches", "requires", "warnings"} <= set(doc)
    assert doc["name"] == "fused" and doc["spec"] == "eagle3"
    assert doc["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc["env"].items())
    assert doc["env"]["NCCL_PROTO"] == "LL"
    assert doc["patches"] == ["sm120-allreduce-fusion"]
    assert doc["argv"][doc["argv"].index("--model-path") + 1] == "/models/target"
    assert isinstance(doc["warnings"], list) and isinstance(doc["requires"], dict)


@pytest.mark.stack
def test_show_spec_option_and_env_var():
    proc = run_launcher("show", "baseline", "--json", "--spec", "off")
    assert not any(t.startswith("--speculative") for t in json.loads(proc.stdout)["argv"])
    proc = run_launcher("show", "baseline", "--json", env=child_env(SPEC="ngram"))
    assert "NGRAM" in json.loads(proc.stdout)["argv"]


@pytest.mark.stack
def test_show_text_is_a_runnable_script():
    proc = run_launcher("show", "nccl-tuned")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "export NCCL_PROTO=LL" in lines
    assert shlex.split(lines[-1])[:3] == ["python", "-m", "sglang.launch_server"]


@pytest.mark.stack
def test_show_without_host_facts_prints_the_fusion_over_pcie_risk():
    """`make show PROFILE=fused` on a laptop names the risk it warns about with a PCIe host's facts."""
    proc = run_launcher("show", "fused")
    assert proc.returncode == 0, proc.stderr
    conditions = [line for line in proc.stdout.splitlines() if line.startswith("# requires (host unknown")]
    assert any("sglang#32330" in line for line in conditions)
    assert any("NCCL_P2P_LEVEL=SYS" in line for line in conditions)
    declared = next(line for line in proc.stdout.splitlines() if line.startswith("# requires: "))
    assert "conditions" not in declared


@pytest.mark.stack
def test_show_with_host_facts_file(tmp_path):
    host = tmp_path / "facts.json"
    host.write_text(
        json.dumps({"interconnect": "pcie-switch", "gpus": [{"index": 0, "compute_cap": "12.0"}]})
    )
    proc = run_launcher("show", "symm-mem", "--host-facts", str(host))
    assert_user_error(proc, "torch symm-mem needs SM 9.x/10.x")


@pytest.mark.stack
def test_show_with_facts_from_a_gpu_less_host_names_what_they_lack(tmp_path):
    """Facts written by `launcher doctor --out` where no nvidia-smi answers (this machine, or any, with PATH
    holding no nvidia-smi) leave fused's conditions open: show names the missing facts, never "host unknown"."""
    facts = tmp_path / "facts.json"
    no_smi = tmp_path / "bin"
    no_smi.mkdir()
    doctor = run_launcher("doctor", "--out", str(facts), env=child_env(PATH=str(no_smi)))
    assert doctor.returncode == 1 and facts.is_file(), doctor.stdout + doctor.stderr  # the nvidia-smi check fails
    proc = run_launcher("show", "fused", "--spec", "eagle3", "--host-facts", str(facts))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not any("host unknown" in line for line in lines), proc.stdout
    [gaps] = [line for line in lines if line.startswith(f"# host facts {facts}: ")]
    for missing in ("no GPUs", "no SM", "no topology", "no P2P status"):
        assert missing in gaps, gaps
    assert f"`launcher doctor --out {facts}` on the GPU host" in gaps
    conditions = [line for line in lines if line.startswith(f"# requires (not settled by {facts}): ")]
    assert any("sglang#32330" in line for line in conditions), proc.stdout


def test_host_facts_gaps_name_only_what_is_missing():
    from helpers_profiles import facts as host

    assert host(sm=None).gaps() == ["no GPUs", "no SM (compute capability)", "no topology (interconnect)", "no P2P status"]
    assert host(sm="12.0", n=8).gaps() == ["no topology (interconnect)", "no P2P status"]
    assert host(sm="12.0", n=8, interconnect="pcie-switch", p2p_ok=True).gaps() == []
    assert host(sm="12.0", n=1).gaps() == []  # one GPU: no links to know


@pytest.mark.stack
def test_show_with_complete_facts_prints_no_gaps_line(tmp_path):
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"interconnect": "pcie-switch", "p2p_ok": True,
                                 "gpus": [{"index": i, "compute_cap": "12.0"} for i in range(8)]}))
    proc = run_launcher("show", "fused", "--spec", "eagle3", "--host-facts", str(facts))
    assert proc.returncode == 0, proc.stderr
    assert "# host facts" not in proc.stdout and "host unknown" not in proc.stdout


@pytest.mark.stack
def test_show_unknown_profile_lists_names():
    proc = run_launcher("show", "fuzed")
    assert_user_error(proc, "unknown profile 'fuzed'", *PROFILE_NAMES)


@pytest.mark.stack
def test_show_toml_syntax_error_has_file_and_line(bad_user_dir):
    proc = run_launcher("show", "broken", env=child_env(KIT_PROFILES_DIR=str(bad_user_dir)))
    assert_user_error(proc, f"{bad_user_dir / 'broken.toml'}:4:")


@pytest.mark.stack
@pytest.mark.parametrize(("extra", "needle"), [('tp = 8\n', "--tp"), ('mem-fraction-static = "lots"\n', "lots")])
def test_show_refuses_what_sglangs_parser_refuses(tmp_path, extra, needle):
    """show prints a runnable command line, so it runs the same parser as check and render."""
    (tmp_path / "p.toml").write_text('extends = "baseline"\ndescription = "x"\n[server]\n' + extra)
    proc = run_launcher("show", "p", "--spec", "off", env=child_env(KIT_PROFILES_DIR=str(tmp_path)))
    assert_user_error(proc, str(tmp_path / "p.toml"), needle)


@pytest.mark.stack
def test_show_env_file_fills_what_the_environment_leaves_unset(tmp_path):
    envfile = tmp_path / ".env"
    envfile.write_text('MODEL_PATH="/from/dotenv"\nKIT_TP_SIZE=4\n# comment\nSPEC=off\n')
    env = child_env()
    del env["MODEL_PATH"]
    proc = run_launcher("show", "baseline", "--json", "--env-file", str(envfile), env=env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["spec"] == "off" and plan["flags"][plan["flags"].index("--model-path") + 1] == "/from/dotenv"
    assert plan["flags"][plan["flags"].index("--tp-size") + 1] == "4"
    # the environment wins over the file, as with docker compose
    proc = run_launcher("show", "baseline", "--json", "--env-file", str(envfile), env=child_env(KIT_TP_SIZE="2"))
    assert json.loads(proc.stdout)["flags"][json.loads(proc.stdout)["flags"].index("--tp-size") + 1] == "2"
    proc = run_launcher("show", "baseline", "--env-file", str(tmp_path / "absent.env"))
    assert_user_error(proc, "absent.env", "cp .env.example .env")


@pytest.mark.stack
def test_show_without_model_paths_previews_with_placeholders_and_says_so():
    """`make show` on a laptop with no .env: a preview with `<MODEL_PATH>` in place of the path, the
    placeholders named on stderr with how to set them; SGLang's parser still checks every flag."""
    env = child_env()
    del env["MODEL_PATH"], env["DRAFT_MODEL_PATH"]
    proc = run_launcher("show", "baseline", env=env)
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.splitlines()[-1])
    assert argv[argv.index("--model-path") + 1] == "<MODEL_PATH>"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "<DRAFT_MODEL_PATH>"
    note = proc.stderr.strip()
    assert len(note.splitlines()) == 1 and note.startswith("note: "), proc.stderr
    for needle in ("<DRAFT_MODEL_PATH>, <MODEL_PATH> are placeholders", "not a command to run",
                   "DRAFT_MODEL_PATH=... MODEL_PATH=... in .env (cp .env.example .env)", "launcher render"):
        assert needle in note
    assert "(with placeholders for DRAFT_MODEL_PATH, MODEL_PATH" in proc.stdout  # the digest is not the real one
    data = run_launcher("show", "baseline", "--spec", "off", "--json", env=env)
    assert data.returncode == 0, data.stderr
    doc = json.loads(data.stdout)
    assert doc["placeholders"] == ["MODEL_PATH"]  # spec off: no draft model
    assert doc["local"]["model-path"] == "<MODEL_PATH>"
    assert "<MODEL_PATH> is a placeholder for unset MODEL_PATH" in data.stderr


@pytest.mark.stack
def test_show_with_model_paths_set_has_no_placeholders():
    proc = run_launcher("show", "baseline", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["placeholders"] == []


@pytest.mark.stack
def test_show_with_placeholders_still_refuses_what_sglangs_parser_refuses(tmp_path):
    """A placeholder path goes through SGLang's parser like any path: a bad flag is still refused."""
    (tmp_path / "p.toml").write_text('extends = "baseline"\ndescription = "x"\n[server]\ntp = 8\n')
    env = child_env(KIT_PROFILES_DIR=str(tmp_path))
    del env["MODEL_PATH"]
    assert_user_error(run_launcher("show", "p", "--spec", "off", env=env), str(tmp_path / "p.toml"), "--tp")
    assert run_launcher("show", "baseline", "--spec", "off", env=env).returncode == 0  # a placeholder alone passes


@pytest.mark.stack
@pytest.mark.parametrize("missing", ["MODEL_PATH", "DRAFT_MODEL_PATH"])
def test_render_without_a_model_path_names_the_variable(tmp_path, missing):
    """render produces what runs: a placeholder never reaches a state dir."""
    env = child_env()
    del env[missing]
    state = tmp_path / "state"
    proc = run_launcher("render", "baseline", "--spec", "eagle3", "--state-dir", str(state), env=env)
    key = "server.model-path" if missing == "MODEL_PATH" else "server.speculative-draft-model-path"
    assert_user_error(proc, missing, key, "in .env (cp .env.example .env)")
    assert "in the profile" not in proc.stderr
    assert not state.exists()


@pytest.mark.stack
def test_show_lays_the_model_overlay_named_by_the_option_or_the_setting():
    proc = run_launcher("show", "fused", "--spec", "off", "--model-overlay", "kimi-k2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model_overlay"] == "kimi-k2" and doc["sources"][-1].endswith("model/kimi-k2.toml")
    assert doc["argv"][-4:] == ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]
    text = run_launcher("show", "fused", "--spec", "off", env=child_env(MODEL_OVERLAY="kimi-k2"))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("# fused + spec off + model kimi-k2 (")
    assert shlex.split(text.stdout.splitlines()[-1])[-2:] == ["--reasoning-parser", "kimi_k2"]
    # '' on the command line is none, whatever the setting says
    none = run_launcher("show", "fused", "--spec", "off", "--model-overlay", "", "--json",
                        env=child_env(MODEL_OVERLAY="kimi-k2"))
    assert "model_overlay" not in json.loads(none.stdout) and "--tool-call-parser" not in json.loads(none.stdout)["argv"]


@pytest.mark.stack
def test_show_env_file_can_name_the_model_overlay(tmp_path):
    envfile = tmp_path / ".env"
    envfile.write_text("MODEL_OVERLAY=deepseek-v3\n")
    proc = run_launcher("show", "baseline", "--spec", "off", "--json", "--env-file", str(envfile))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model_overlay"] == "deepseek-v3"


@pytest.mark.stack
@pytest.mark.parametrize("how", ["option", "setting"])
def test_an_unknown_model_overlay_is_exit_2_naming_it_and_the_known_ones(how):
    args, env = (["--model-overlay", "kimi"], child_env()) if how == "option" else ([], child_env(MODEL_OVERLAY="kimi"))
    for cmd in (["show", "baseline"], ["check", "baseline"], ["check", "--all"]):
        proc = run_launcher(*cmd, *args, env=env)
        assert_user_error(proc, "unknown model overlay 'kimi'", *MODEL_OVERLAYS)


@pytest.mark.stack
def test_serve_starts_with_the_model_overlay_setting_and_refuses_an_unknown_one(tmp_path):
    env = child_env(KIT_PATCH_CHECK="skip", MODEL_OVERLAY="kimi-k2")
    proc = run_launcher("serve", "--dry-run", "--state-dir", str(tmp_path / "a"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "serve: profile baseline + eagle3 + model kimi-k2 (digest" in proc.stderr
    assert json.loads((tmp_path / "a" / "profile.json").read_text())["model_overlay"] == "kimi-k2"
    bad = run_launcher("serve", "--dry-run", "--state-dir", str(tmp_path / "b"), env={**env, "MODEL_OVERLAY": "nope"})
    assert_user_error(bad, "unknown model overlay 'nope'", *MODEL_OVERLAYS)


@pytest.mark.stack
def test_model_overlays_of_a_user_folder_are_known(tmp_path):
    root = write_profiles(tmp_path / "u", {"model/mine.toml": profile_toml("mine", server={"tool-call-parser": "qwen"})})
    proc = run_launcher("show", "baseline", "--spec", "off", "--model-overlay", "mine", "--json",
                        env=child_env(KIT_PROFILES_DIR=str(root)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["argv"][-2:] == ["--tool-call-parser", "qwen"]
    bad = run_launcher("show", "baseline", "--model-overlay", "nope", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert_user_error(bad, "unknown model overlay 'nope'", "mine", *MODEL_OVERLAYS)


# ---- check --------------------------------------------------------------------------------------


@pytest.mark.stack
def test_check_all_with_the_real_parser():
    env = child_env()
    del env["MODEL_PATH"], env["DRAFT_MODEL_PATH"]  # check works without a model: placeholders
    proc = run_launcher("check", "--all", "--require-parser", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "flags checked with SGLang 0.5.23's argument parser" in proc.stdout
    for name in PROFILE_NAMES:
        for spec in SPEC_MODES:
            assert f"ok    {name} + {spec}\n" in proc.stdout
            for overlay in MODEL_OVERLAYS:  # --all checks every model overlay too
                assert f"ok    {name} + {spec} + model {overlay}\n" in proc.stdout
    assert "FAIL" not in proc.stdout
    assert "checked as placeholders" in proc.stdout
    n = len(PROFILE_NAMES) * len(SPEC_MODES) * (len(MODEL_OVERLAYS) + 1)
    assert f"{n} ok, 0 invalid (" in proc.stdout and f"model overlay(s): none, {', '.join(MODEL_OVERLAYS)})" in proc.stdout


@pytest.mark.stack
def test_check_named_profiles_take_the_setting_or_the_option():
    plain = run_launcher("check", "baseline", "--spec", "off")
    assert plain.returncode == 0 and plain.stdout.startswith("ok    baseline + off\n"), plain.stdout
    assert "model overlay" not in plain.stdout
    setting = run_launcher("check", "baseline", "--spec", "off", env=child_env(MODEL_OVERLAY="kimi-k2"))
    assert setting.returncode == 0 and "ok    baseline + off + model kimi-k2\n" in setting.stdout, setting.stdout
    every = run_launcher("check", "baseline", "--spec", "off", "--model-overlay", "all")
    assert [line for line in every.stdout.splitlines() if line.startswith("ok")] == [
        "ok    baseline + off", *(f"ok    baseline + off + model {o}" for o in MODEL_OVERLAYS)]


@pytest.mark.stack
def test_check_all_fails_a_user_model_overlay_sglang_refuses(tmp_path):
    root = write_profiles(tmp_path / "u", {"model/typo.toml": profile_toml("typo", server={"reasoning-parser": "kimi-k2"})})
    proc = run_launcher("check", "--all", "--spec", "off", "--require-parser", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for name in PROFILE_NAMES:
        assert f"FAIL  {name} + off + model typo" in proc.stdout and f"ok    {name} + off + model kimi-k2" in proc.stdout
    assert f"{root / 'model' / 'typo.toml'}: key 'server.reasoning-parser'" in proc.stdout


@pytest.mark.stack
def test_check_bad_user_profile_fails_through_the_parser(bad_user_dir):
    env = child_env(KIT_PROFILES_DIR=str(bad_user_dir))
    proc = run_launcher("check", "abbrev", "tree", "--require-parser", "--spec", "eagle3", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{bad_user_dir / 'abbrev.toml'}: key 'server.tp'" in proc.stdout
    assert "write the full name" in proc.stdout
    assert f"{bad_user_dir / 'tree.toml'}: key 'env.NCCL_ALGO'" in proc.stdout
    assert "FAIL  abbrev + eagle3" in proc.stdout and "FAIL  tree + eagle3" in proc.stdout
    assert "2 plan(s) invalid" in proc.stderr


DETERMINISTIC_PINNED = ("NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")


@pytest.mark.stack
def test_deterministic_inference_over_nccl_tuned_is_exit_2_from_show_check_and_serve(tmp_path):
    """nccl-tuned's NCCL values would replace the ones SGLang pins for the flag in every TP worker
    (rule deterministic_env_conflict): each command refuses naming the flag and every variable; with the
    variables dropped (`NAME = false`) the same profile passes."""
    flag = {"enable-deterministic-inference": True}
    root = write_profiles(tmp_path / "u", {
        "det.toml": profile_toml("deterministic over nccl-tuned", extends="nccl-tuned", server=flag),
        "det-fixed.toml": profile_toml("deterministic, SGLang's NCCL values", extends="nccl-tuned", server=flag,
                                       env=dict.fromkeys(DETERMINISTIC_PINNED, False)),
    })
    env = child_env(KIT_PROFILES_DIR=str(root), KIT_PATCH_CHECK="skip")
    needles = ["--enable-deterministic-inference", *(f"key 'env.{name}'" for name in DETERMINISTIC_PINNED)]
    assert_user_error(run_launcher("show", "det", "--spec", "off", env=env), *needles)
    serve = run_launcher("serve", "--dry-run", "--profile", "det", "--spec", "off",
                         "--state-dir", str(tmp_path / "state"), env=env)
    assert_user_error(serve, *needles)
    assert not (tmp_path / "state" / "profile.json").exists()
    check = run_launcher("check", "det", "det-fixed", "--spec", "off", env=env)
    assert check.returncode == 2, check.stdout + check.stderr
    assert "FAIL  det + off" in check.stdout and "ok    det-fixed + off" in check.stdout
    assert all(needle in check.stdout for needle in needles), check.stdout


@pytest.mark.stack
def test_check_schema_error_names_file_and_key(tmp_path):
    root = write_profiles(
        tmp_path / "u", {"typo.toml": 'description = "x"\n[requires]\ninterconect = "pcie"\n'}
    )
    proc = run_launcher("check", "typo", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert_user_error(proc, str(root / "typo.toml"), "key 'requires.interconect'")


# ---- render -------------------------------------------------------------------------------------


@pytest.mark.stack
def test_render_writes_files_atomically(tmp_path):
    state = tmp_path / "state"
    proc = run_launcher("render", "fused", "--state-dir", str(state))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(state / "profile.json")
    names = {p.name for p in state.iterdir()}
    assert {"cmdline", "profile.json"} <= names
    assert [n for n in names if n.startswith(".") or n.endswith(".tmp")] == []  # no temp files left
    doc = json.loads((state / "profile.json").read_text())
    assert doc["name"] == "fused" and doc["spec"] == "eagle3"
    assert (state / "cmdline").read_text() == shlex.join(doc["argv"]) + "\n"


@pytest.mark.stack
@pytest.mark.parametrize("profile", ["broken", "tree", "not-a-profile"])
def test_render_bad_input_leaves_state_untouched(tmp_path, bad_user_dir, profile):
    state = tmp_path / "state"
    state.mkdir()
    (state / "profile.json").write_text('{"name": "previous", "env": {"A": "1"}}\n')
    (state / "cmdline").write_text("python -m sglang.launch_server --model-path /previous\n")
    (state / "history.jsonl").write_text('{"profile": "previous"}\n')
    before = snapshot(state)
    proc = run_launcher(
        "render", profile, "--state-dir", str(state), env=child_env(KIT_PROFILES_DIR=str(bad_user_dir))
    )
    assert_user_error(proc)
    assert snapshot(state) == before


@pytest.mark.stack
def test_render_into_a_missing_dir_with_bad_input_creates_nothing(tmp_path, bad_user_dir):
    state = tmp_path / "never"
    proc = run_launcher(
        "render", "broken", "--state-dir", str(state), env=child_env(KIT_PROFILES_DIR=str(bad_user_dir))
    )
    assert proc.returncode == 2
    assert not state.exists()


@pytest.mark.stack
def test_no_subcommand_is_a_usage_error():
    proc = run_launcher()
    assert proc.returncode == 2
    assert "usage: launcher" in proc.stderr


# ---- newcomer paths: version, messages that name the right fix --------------------------------------


@pytest.mark.stack
def test_version_of_launcher_and_bench_is_the_one_in_launcher_init():
    import subprocess
    import sys

    from helpers_profiles import REPO

    from launcher import __version__

    proc = run_launcher("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"launcher {__version__}", proc.stderr
    bench = subprocess.run([sys.executable, "-m", "bench", "--version"], cwd=REPO, env=child_env(),
                           capture_output=True, text=True, timeout=60)
    assert bench.returncode == 0 and bench.stdout.strip() == f"bench {__version__}", bench.stderr


@pytest.mark.stack
def test_status_of_an_unreachable_api_names_the_flag_it_accepts():
    from testsupport.net import free_port

    proc = run_launcher("status", "--url", f"http://127.0.0.1:{free_port()}")
    assert proc.returncode == 1, proc.stderr
    assert "is unreachable" in proc.stderr and "(--url / KIT_CONTROL_URL)" in proc.stderr
    assert "--control" not in proc.stderr  # `launcher status` refuses that flag


@pytest.mark.stack
def test_check_all_checks_every_profile_past_a_broken_file_and_sums_up(tmp_path):
    root = write_profiles(tmp_path / "u", {"aaa-broken.toml": 'description = "x"\nstatus = \n',
                                            "zzz-fine.toml": profile_toml("fine", extends="baseline")})
    proc = run_launcher("check", "--all", "--spec", "off", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "FAIL  aaa-broken + off" in proc.stdout
    assert f"error: {root / 'aaa-broken.toml'}:2: TOML syntax error" in proc.stdout
    for name in [*PROFILE_NAMES, "zzz-fine"]:
        assert f"ok    {name} + off" in proc.stdout
    overlays = len(MODEL_OVERLAYS) + 1  # --all: none and every model overlay
    assert f"{(len(PROFILE_NAMES) + 1) * overlays} ok, {overlays} invalid" in proc.stdout


@pytest.mark.stack
def test_check_prints_each_warning_once_with_the_profiles_it_applies_to():
    proc = run_launcher("check", "--all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nccl_proto = [line for line in proc.stdout.splitlines() if "key 'env.NCCL_PROTO'" in line]
    assert len(nccl_proto) == 1, proc.stdout
    applies = proc.stdout.splitlines()[proc.stdout.splitlines().index(nccl_proto[0]) + 1]
    assert applies.strip().startswith("for: ") and "nccl-tuned" in applies and "fused" in applies
    assert "baseline" not in applies


@pytest.mark.stack
def test_check_prints_each_error_once_then_its_number(tmp_path):
    """symm-mem on a PCIe SM120 host fails under every spec mode for the same reasons: each is printed
    in full once, later plans point at it; its [requires] restating the symm-mem rule is left out."""
    host = tmp_path / "facts.json"
    gpus = [{"index": i, "compute_cap": "12.0"} for i in range(8)]
    host.write_text(json.dumps({"interconnect": "pcie-switch", "gpus": gpus}))
    proc = run_launcher("check", "symm-mem", "--host-facts", str(host))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out.count("      as above: [1] [2]") == len(SPEC_MODES) - 1, proc.stdout
    assert proc.stdout.count("torch symm-mem needs SM 9.x/10.x, this host has SM 12.0") == 1
    assert proc.stdout.count("torch symm-mem needs NVLink multicast, this host is PCIe-only") == 1
    assert any(line.startswith("      [1] ineligible: ") and "symm-mem.toml" in line for line in out)
    assert "key 'requires.sm'" not in proc.stdout and "key 'requires.interconnect'" not in proc.stdout
    assert f"0 ok, {len(SPEC_MODES)} invalid" in proc.stdout


@pytest.mark.stack
def test_profiles_shows_why_a_file_is_invalid(tmp_path):
    root = write_profiles(tmp_path / "u", {"broken.toml": 'description = "x"\nstatus = \n'})
    proc = run_launcher("profiles", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("broken "))
    assert "invalid" in line and f"{root / 'broken.toml'}:2: TOML syntax error" in line


@pytest.mark.stack
def test_bug_6_launcher_profiles_survives_damaged_files_and_shows_each_in_one_short_line(tmp_path):
    """Defect 6: a user profile with a 5000-digit [adaptive_tiers] key or a 5000-deep array made `launcher
    profiles` a traceback; a 5 MB description was printed whole."""
    root = write_profiles(tmp_path / "u", {
        "bigkey.toml": profile_toml("k") + '[adaptive_tiers]\n"' + "1" * 5000 + '" = [1]\n',
        "deep.toml": 'description = "d"\n[env]\nA = ' + "[" * 5000 + "]" * 5000 + "\n",
        "self.toml": profile_toml("s", extends="self"),
        "huge.toml": 'description = "' + "d" * 5_000_000 + '"\n',
        "wordy.toml": profile_toml("w" * 900),
        "Ünï.toml": profile_toml("u"),
        "good.toml": profile_toml("fine"),
    })
    env = child_env(KIT_PROFILES_DIR=str(root))
    proc = run_launcher("profiles", env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = {x.split()[0]: x for x in proc.stdout.splitlines()}
    for name in ("bigkey", "deep", "self", "huge", "Ünï"):
        assert lines[name].split()[1] == "invalid" and len(lines[name]) < 400, lines[name]
    assert lines["good"].split()[1:] == ["experimental", "fine"] and "baseline" in lines
    assert len(lines["wordy"]) < 300 and len(proc.stdout) < 10_000
    rows = json.loads(run_launcher("profiles", "--json", env=env).stdout)
    assert {r["name"] for r in rows if r["status"] == "invalid"} == {"bigkey", "deep", "self", "huge", "Ünï"}
    check = run_launcher("check", "bigkey", "--spec", "eagle3-adaptive", env=env)
    assert_user_error(check, "bigkey.toml: key 'adaptive_tiers': tier '11111111111111111111'... is no batch size")
