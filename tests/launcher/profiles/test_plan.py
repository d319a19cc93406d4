"""launcher.profiles.plan: command line composition, ${VAR} expansion, digest, and golden plans for every profile x spec mode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers_profiles import BUILTIN, ENV, REPO, clean_env, facts, profile_toml, write_profiles

from launcher import settings
from launcher.errors import UserError
from launcher.profiles import loader as profiles
from launcher.profiles import plan as plans
from launcher.profiles import spec_params
from launcher.profiles.plan import build_plan, reach_url

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
PROFILE_NAMES = sorted(p.stem for p in BUILTIN.glob("*.toml") if p.stem != "base")
SPEC_MODES = sorted(p.stem for p in (BUILTIN / "spec").glob("*.toml"))


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


@pytest.fixture
def user(tmp_path, monkeypatch):
    def write(files: dict[str, str]) -> Path:
        root = write_profiles(tmp_path / "user", files)
        monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
        return root

    return write


# ---- argv ---------------------------------------------------------------------------------------


def test_argv_starts_with_sglang_module_call():
    plan = plans.build_plan("baseline", "off", environ=ENV)
    assert plan.argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert plan.argv[3:] == plan.flags


def test_kit_server_cmd_is_split_shell_style():
    env = {**ENV, "KIT_SERVER_CMD": "'/opt/my env/bin/python' -m testsupport.standin --label \"a b\""}
    plan = plans.build_plan("baseline", "off", environ=env)
    assert plan.argv[:5] == ["/opt/my env/bin/python", "-m", "testsupport.standin", "--label", "a b"]
    assert plan.argv[5:] == plan.flags


def test_blank_kit_server_cmd_means_default():
    assert plans.server_cmd({"KIT_SERVER_CMD": "   "}) == ["python", "-m", "sglang.launch_server"]


def test_true_is_bare_flag_false_omitted_lists_expand(user):
    user(
        {
            "parent.toml": profile_toml("p", server={"trust-remote-code": False, "dropped-flag": "x"}),
            "p.toml": profile_toml(
                "p",
                extends="parent",
                server={
                    "dropped-flag": False,
                    "enable-foo": True,
                    "cuda-graph-bs-decode": [1, 2, 4],
                    "mem-fraction-static": 0.85,
                    "label": "${DRAFT_MODEL_PATH}",
                },
            ),
        }
    )
    flags = plans.build_plan("p", "off", environ=ENV).flags
    assert "--trust-remote-code" not in flags  # base sets it, the parent unsets it
    assert "--dropped-flag" not in flags
    i = flags.index("--enable-foo")
    assert flags[i + 1].startswith("--")  # bare flag, no value after it
    i = flags.index("--cuda-graph-bs-decode")
    assert flags[i + 1 : i + 4] == ["1", "2", "4"]
    i = flags.index("--mem-fraction-static")
    assert flags[i + 1] == "0.85"
    assert flags[flags.index("--label") + 1] == "/models/draft"
    assert flags[-2:] == ["--label", "/models/draft"]


def test_flags_use_the_full_key_names_of_the_profile():
    res = profiles.load("fused")
    profiles.apply_spec(res, "eagle3")
    plan = plans.build_plan("fused", "eagle3", environ=ENV)
    names = [t for t in plan.flags if t.startswith("--")]
    assert names == [f"--{k}" for k in res.server]
    assert plan.flags[plan.flags.index("--tp-size") + 1] == "8"
    assert plan.flags[plan.flags.index("--model-path") + 1] == "/models/target"
    assert plan.flags[plan.flags.index("--speculative-draft-model-path") + 1] == "/models/draft"
    assert "--trust-remote-code" in plan.flags and "--enable-metrics" in plan.flags


def test_env_values_are_strings():
    plan = plans.build_plan("custom-ar", "eagle3", environ=ENV)
    assert plan.env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert "NCCL_CUMEM_ENABLE" not in plan.env  # SGLang writes 0 itself (engine.py:1898-1907)
    assert "NCCL_BUFFSIZE" not in plan.env  # sizes only Simple, which NCCL_PROTO=LL never uses
    assert "SGLANG_PCIE_IPC_MAX_NUMEL" not in plan.env  # SGLang sizes the workspace from its own flags
    assert plan.expects == ["pcie-ipc"]
    assert all(isinstance(v, str) for v in plan.env.values())


def test_kit_knobs_reach_env_and_flags():
    env = {**ENV, "KIT_TP_SIZE": "4", "KIT_NCCL_P2P_LEVEL": "PXB", "KIT_SERVER_PORT": "31000"}
    plan = plans.build_plan("ep", "off", environ=env)
    assert plan.env["NCCL_P2P_LEVEL"] == "PXB"
    assert plan.flags[plan.flags.index("--tp-size") + 1] == "4"
    assert plan.flags[plan.flags.index("--ep-size") + 1] == "4"
    assert plan.flags[plan.flags.index("--port") + 1] == "31000"


def test_plan_carries_patches_requires_sources():
    plan = plans.build_plan("fused", "eagle3", environ=ENV)
    assert plan.patches == ["sm120-allreduce-fusion"]
    declared = {k: v for k, v in plan.requires.items() if k != "conditions"}
    assert declared == profiles.load("fused").requires.model_dump(exclude_none=True)
    # without host facts the interconnect-dependent rules are conditions (fusion over PCIe, P2P level)
    assert {"fusion over PCIe" if "sglang#32330" in c else "p2p" if "NCCL_P2P_LEVEL" in c else c
            for c in plan.requires["conditions"]} == {"fusion over PCIe", "p2p"}
    assert plan.requires["p2p"] is True and plan.requires["sm"] == ["9.0", "10.0", "12.0"]
    assert plan.sources == [
        str(BUILTIN / f) for f in ("base.toml", "nccl-tuned.toml", "fused.toml", "spec/eagle3.toml")
    ]
    assert plan.name == "fused" and plan.spec == "eagle3" and plan.status == "experimental"


def test_build_plan_raises_with_every_blocking_finding(user):
    root = user(
        {
            "p.toml": profile_toml(
                "p", env={"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}, requires={"interconnect": "pcie"}
            )
        }
    )
    with pytest.raises(UserError) as exc:
        plans.build_plan("p", "off", environ=ENV)
    msg = str(exc.value)
    assert "env.NCCL_ALGO" in msg and "env.NCCL_PROTO" in msg
    assert msg.count(str(root / "p.toml")) == 2


def test_ineligible_blocks_build_but_evaluate_returns_it():
    f = facts("pcie-switch", "12.0")
    plan, findings = plans.evaluate("symm-mem", "off", f, environ=ENV)
    assert {x.level for x in findings} >= {"ineligible"}
    assert plan.name == "symm-mem"
    with pytest.raises(UserError, match="torch symm-mem"):
        plans.build_plan("symm-mem", "off", f, environ=ENV)


def test_check_environ_turns_unset_into_placeholders():
    env = plans.check_environ({})
    plan, _ = plans.evaluate("baseline", "eagle3", environ=env)
    assert plan.flags[plan.flags.index("--model-path") + 1] == "<MODEL_PATH>"
    assert plan.flags[plan.flags.index("--speculative-draft-model-path") + 1] == "<DRAFT_MODEL_PATH>"
    assert env.used == {"MODEL_PATH", "DRAFT_MODEL_PATH"}


def test_default_environ_is_the_process_environment(monkeypatch):
    monkeypatch.setenv("MODEL_PATH", "/from/os/environ")
    plan = plans.build_plan("baseline", "off")
    assert plan.flags[plan.flags.index("--model-path") + 1] == "/from/os/environ"


# ---- ${VAR} expansion ---------------------------------------------------------------------------


def test_variable_expansion_with_and_without_default(user):
    user(
        {
            "p.toml": profile_toml(
                "p", env={"A": "${FOO}", "B": "${BAR:-dflt}", "C": "x${FOO}y"}, server={"x": "${BAR:-9}"}
            )
        },
    )
    plan = plans.build_plan("p", "off", environ={**ENV, "FOO": "foo"})
    assert plan.env["A"] == "foo" and plan.env["B"] == "dflt" and plan.env["C"] == "xfooy"
    assert plan.flags[-2:] == ["--x", "9"]
    plan = plans.build_plan("p", "off", environ={**ENV, "FOO": "f", "BAR": "bar"})
    assert plan.env["B"] == "bar" and plan.flags[-2:] == ["--x", "bar"]


def test_unset_variable_names_variable_file_and_key(user):
    root = user({"p.toml": profile_toml("p", env={"A": "${NOT_SET_ANYWHERE}"})})
    with pytest.raises(UserError) as exc:
        plans.build_plan("p", "off", environ=ENV)
    msg = str(exc.value)
    assert "NOT_SET_ANYWHERE" in msg
    assert str(root / "p.toml") in msg
    assert "env.A" in msg


def test_unset_model_path_names_base_toml():
    with pytest.raises(UserError) as exc:
        plans.build_plan("baseline", "off", environ={"DRAFT_MODEL_PATH": "/d"})
    assert "MODEL_PATH" in str(exc.value)
    assert str(BUILTIN / "base.toml") in str(exc.value)
    assert "server.model-path" in str(exc.value)


def test_every_unset_variable_is_named_in_one_error():
    """A new user learns of MODEL_PATH and DRAFT_MODEL_PATH together, not one fix at a time."""
    with pytest.raises(UserError) as exc:
        plans.build_plan("baseline", "eagle3", environ={})
    msg = str(exc.value)
    assert "MODEL_PATH is not set" in msg and "DRAFT_MODEL_PATH is not set" in msg
    assert str(BUILTIN / "spec" / "eagle3.toml") in msg and "server.speculative-draft-model-path" in msg


# ---- digest -------------------------------------------------------------------------------------


def test_digest_changes_with_env_or_flags_not_with_server_cmd():
    base = plans.build_plan("nccl-tuned", "eagle3", environ=ENV)
    same_cmd = plans.build_plan(
        "nccl-tuned", "eagle3", environ={**ENV, "KIT_SERVER_CMD": "python -m testsupport.standin"}
    )
    env_changed = plans.build_plan("nccl-tuned", "eagle3", environ={**ENV, "KIT_NCCL_P2P_LEVEL": "PHB"})
    flag_changed = plans.build_plan("nccl-tuned", "eagle3", environ={**ENV, "MODEL_PATH": "/models/other"})
    spec_changed = plans.build_plan("nccl-tuned", "ngram", environ=ENV)
    assert same_cmd.argv != base.argv
    assert same_cmd.digest() == base.digest()
    assert env_changed.digest() != base.digest()
    assert flag_changed.digest() != base.digest()
    assert spec_changed.digest() != base.digest()
    assert len({base.digest(), env_changed.digest(), flag_changed.digest(), spec_changed.digest()}) == 4
    assert base.to_json()["digest"] == base.digest()


def test_digest_is_stable_across_calls():
    a = plans.build_plan("fused", "eagle3", environ=ENV).digest()
    b = plans.build_plan("fused", "eagle3", environ=dict(reversed(list(ENV.items())))).digest()
    assert a == b and len(a) == 16


def test_profiles_differ_in_digest():
    digests = {plans.build_plan(n, "eagle3", environ=ENV).digest() for n in PROFILE_NAMES}
    assert len(digests) == len(PROFILE_NAMES)


# ---- golden plans -------------------------------------------------------------------------------


def _golden_doc(name: str, spec: str) -> dict:
    plan = plans.build_plan(name, spec, environ=ENV)
    doc = plan.to_json()
    # Paths relative to the repository root, so the files compare equal on any checkout.
    doc["sources"] = [Path(s).relative_to(REPO).as_posix() for s in doc["sources"]]
    # a file a flag names (the adaptive EAGLE config) is a path in the checkout too; the digests hash its content
    return json.loads(json.dumps(doc).replace(json.dumps(str(REPO) + "/")[1:-1], ""))


@pytest.mark.parametrize("spec", SPEC_MODES)
@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_golden_plan(name, spec):
    path = GOLDEN / f"{name}__{spec}.json"
    doc = _golden_doc(name, spec)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing; regenerate with UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert json.loads(expected) == doc, (
        f"plan {name}+{spec} changed; review, then regenerate with UPDATE_GOLDEN=1"
    )
    assert expected == text  # byte for byte, including key order and formatting


def test_golden_set_has_no_stale_files():
    expected = {f"{n}__{s}.json" for n in PROFILE_NAMES for s in SPEC_MODES}
    assert {p.name for p in GOLDEN.glob("*.json")} == expected


def test_golden_plans_are_substantive():
    fused = json.loads((GOLDEN / "fused__eagle3.json").read_text())
    assert fused["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert fused["env"]["NCCL_PROTO"] == "LL" and fused["env"]["NCCL_ALGO"] == "Ring"
    assert "--speculative-algorithm" in fused["argv"] and "EAGLE3" in fused["argv"]
    off = json.loads((GOLDEN / "baseline__off.json").read_text())
    assert off["env"] == {} and not any(t.startswith("--speculative") for t in off["argv"])


@pytest.mark.parametrize(
    ("server", "url"),
    [
        ({"host": "0.0.0.0", "port": "31000"}, "http://127.0.0.1:31000"),
        ({"host": "10.1.2.3", "port": "1"}, "http://10.1.2.3:1"),
        ({"host": "::1", "port": "2"}, "http://[::1]:2"),
        ({"model-path": "/m"}, "http://127.0.0.1:30000"),
    ],
)
def test_the_server_url_is_computed_when_the_plan_is_built(server, url):
    assert reach_url(server) == url


def test_a_built_plan_carries_where_its_server_answers():
    assert build_plan("baseline", "off", environ={**ENV, "KIT_SERVER_PORT": "31234"}).server_url == "http://127.0.0.1:31234"


def test_no_spec_means_the_one_default_spec():
    assert build_plan("baseline", environ={**ENV, "SPEC": "off"}).spec == "off"
    assert build_plan("baseline", environ=ENV).spec == settings.SPEC.default


# ---- setup digest: the same setup on another host ------------------------------------------------


def _model_dir(root: Path, name: str, config: str) -> str:
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text(config)
    return str(path)


def test_setup_digest_ignores_model_location_host_and_port_but_digest_does_not(tmp_path):
    config = '{"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168}'
    here = {"MODEL_PATH": _model_dir(tmp_path / "a", "Kimi-K2", config),
            "DRAFT_MODEL_PATH": _model_dir(tmp_path / "a", "Kimi-K2-eagle3", "{}")}
    there = {"MODEL_PATH": _model_dir(tmp_path / "b" / "models", "Kimi-K2", config),
             "DRAFT_MODEL_PATH": _model_dir(tmp_path / "b" / "models", "Kimi-K2-eagle3", "{}"),
             "KIT_SERVER_HOST": "127.0.0.1", "KIT_SERVER_PORT": "31000"}
    a = plans.build_plan("fused", "eagle3", environ=here)
    b = plans.build_plan("fused", "eagle3", environ=there)
    assert a.setup_digest() == b.setup_digest()
    assert a.digest() != b.digest()  # the runtime still sees another command line
    doc = b.to_json()
    assert doc["setup_digest"] == b.setup_digest() and doc["digest"] == b.digest()
    assert doc["local"] == {"model-path": there["MODEL_PATH"], "host": "127.0.0.1", "port": "31000",
                            "speculative-draft-model-path": there["DRAFT_MODEL_PATH"]}
    assert doc["model"]["model-path"]["name"] == "Kimi-K2" and doc["model"]["model-path"]["config_sha256"]


def test_setup_digest_changes_with_the_model_and_with_the_setup(tmp_path):
    env = {"MODEL_PATH": _model_dir(tmp_path / "a", "m", '{"hidden_size": 7168}'), "DRAFT_MODEL_PATH": "/d"}
    other_config = {**env, "MODEL_PATH": _model_dir(tmp_path / "b", "m", '{"hidden_size": 4096}')}
    other_name = {**env, "MODEL_PATH": _model_dir(tmp_path / "c", "n", '{"hidden_size": 7168}')}
    base = plans.build_plan("baseline", "off", environ=env).setup_digest()
    assert plans.build_plan("baseline", "off", environ=other_config).setup_digest() != base
    assert plans.build_plan("baseline", "off", environ=other_name).setup_digest() != base
    assert plans.build_plan("nccl-tuned", "off", environ=env).setup_digest() != base


def test_setup_digest_covers_a_model_overlay_through_what_it_sets(user):
    user({"model/same.toml": profile_toml("same parsers", server={"tool-call-parser": "kimi_k2",
                                                                   "reasoning-parser": "kimi_k2"}),
          "model/empty.toml": profile_toml("sets nothing")})
    none = build_plan("baseline", "eagle3", environ=ENV)
    kimi = build_plan("baseline", "eagle3", environ=ENV, model_overlay="kimi-k2")
    assert kimi.setup_digest() != none.setup_digest() and kimi.digest() != none.digest()
    # the same flags under another name are the same setup; an overlay that sets nothing changes nothing
    assert build_plan("baseline", "eagle3", environ=ENV, model_overlay="same").setup_digest() == kimi.setup_digest()
    assert build_plan("baseline", "eagle3", environ=ENV, model_overlay="empty").setup_digest() == none.setup_digest()


# ---- model overlays ----------------------------------------------------------------------------------


def _flag(plan, flag: str) -> str | None:
    return plan.flags[plan.flags.index(flag) + 1] if flag in plan.flags else None


@pytest.mark.parametrize("spec", SPEC_MODES)
def test_a_model_overlay_is_laid_over_profile_and_spec_and_recorded(spec):
    plan = build_plan("fused", spec, environ=ENV, model_overlay="kimi-k2")
    assert _flag(plan, "--tool-call-parser") == "kimi_k2" and _flag(plan, "--reasoning-parser") == "kimi_k2"
    assert plan.flags[-4:] == ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]  # laid last
    assert plan.model_overlay == "kimi-k2" and plan.sources[-1] == str(BUILTIN / "model" / "kimi-k2.toml")
    assert plan.env == build_plan("fused", spec, environ=ENV).env  # parsers only: no env
    doc = plan.to_json()
    assert doc["model_overlay"] == "kimi-k2"
    assert plans.Plan.from_json(doc) == plan  # a stored plan keeps its overlay


def test_the_model_overlay_setting_is_the_default_and_an_empty_name_is_none():
    with_setting = {**ENV, "MODEL_OVERLAY": "deepseek-v3"}
    plan = build_plan("baseline", "off", environ=with_setting)
    assert plan.model_overlay == "deepseek-v3" and _flag(plan, "--tool-call-parser") == "deepseekv3"
    assert build_plan("baseline", "off", environ=with_setting, model_overlay="kimi-k2").model_overlay == "kimi-k2"
    none = build_plan("baseline", "off", environ=with_setting, model_overlay="")
    assert none.model_overlay is None and "--tool-call-parser" not in none.flags
    assert build_plan("baseline", "off", environ={**ENV, "MODEL_OVERLAY": ""}).model_overlay is None


def test_without_a_model_overlay_the_plan_document_is_unchanged():
    """Goldens and stored plans: no `model_overlay` key unless one was laid."""
    plan = build_plan("baseline", "off", environ=ENV)
    assert plan.model_overlay is None and "model_overlay" not in plan.to_json()
    assert plans.Plan.from_json(plan.to_json()).model_overlay is None


def test_an_unknown_model_overlay_setting_names_it_and_the_known_ones():
    with pytest.raises(UserError) as exc:
        build_plan("baseline", "off", environ={**ENV, "MODEL_OVERLAY": "kimi-k9"})
    assert "unknown model overlay 'kimi-k9'" in str(exc.value)
    assert "deepseek-v3, kimi-k2" in str(exc.value) and "MODEL_OVERLAY" in str(exc.value)


@pytest.mark.parametrize("overlay", sorted(p.stem for p in (BUILTIN / "model").glob("*.toml")))
def test_every_builtin_model_overlay_passes_sglangs_parser(overlay):
    pytest.importorskip("sglang")
    plan = build_plan("baseline", "eagle3", environ=ENV, model_overlay=overlay, use_parser=True)
    assert plan.model_overlay == overlay and "--tool-call-parser" in plan.flags


def test_sglangs_parser_refuses_a_parser_name_it_does_not_have_naming_the_overlay(user):
    pytest.importorskip("sglang")
    root = user({"model/typo.toml": profile_toml("typo", server={"tool-call-parser": "kimi-k2"})})
    with pytest.raises(UserError) as exc:
        build_plan("baseline", "off", environ=ENV, model_overlay="typo", use_parser=True)
    assert f"{root / 'model' / 'typo.toml'}: key 'server.tool-call-parser'" in str(exc.value)
    assert "invalid choice: 'kimi-k2'" in str(exc.value)


# ---- a profile's [spec_params] ----------------------------------------------------------------------

PINS = "[spec_params]\nsteps = 2\ntopk = 1\ndraft_tokens = 3\n"


def _point(plan) -> tuple[str | None, str | None, str | None]:
    return tuple(_flag(plan, f"--{k}") for k in spec_params.KEYS)


def test_a_profiles_spec_params_beat_the_overlay_and_an_explicit_point_beats_both(user):
    root = user({"pinned.toml": profile_toml("pinned", extends="fused") + PINS,
                 "kid.toml": profile_toml("kid", extends="pinned"),
                 "same.toml": profile_toml("same", extends="fused")})
    overlay = build_plan("same", "eagle3", environ=ENV)
    pinned = build_plan("pinned", "eagle3", environ=ENV)
    assert _point(overlay) == ("3", "1", "4") and overlay.spec_params_from is None
    assert _point(pinned) == ("2", "1", "3") and pinned.flags.count("--speculative-num-steps") == 1
    assert pinned.spec_params == spec_params.SpecParams(steps=2, topk=1, draft_tokens=3)
    assert pinned.spec_params_from == str(root / "pinned.toml")
    assert pinned.digest() != overlay.digest() and pinned.setup_digest() != overlay.setup_digest()
    kid = build_plan("kid", "eagle3", environ=ENV)  # inherited through extends, origin kept
    assert _point(kid) == ("2", "1", "3") and kid.spec_params_from == str(root / "pinned.toml")
    explicit = build_plan("pinned", "eagle3", environ=ENV, spec_params="1,1,2")
    assert _point(explicit) == ("1", "1", "2") and explicit.spec_params_from is None
    assert explicit.digest() == build_plan("same", "eagle3", environ=ENV, spec_params="1,1,2").digest()
    doc = pinned.to_json()
    assert doc["spec_params_from"] == str(root / "pinned.toml") and "spec_params_from" not in overlay.to_json()
    assert plans.Plan.from_json(doc) == pinned


@pytest.mark.parametrize("spec", ["off", "ngram"])
def test_a_profiles_spec_params_are_ignored_without_eagle(user, spec):
    user({"pinned.toml": profile_toml("pinned", extends="fused") + PINS,
          "same.toml": profile_toml("same", extends="fused")})
    plan, findings = plans.evaluate("pinned", spec, environ=ENV)
    assert plan.spec_params is None and plan.spec_params_from is None
    assert not [f for f in findings if f.level == "error"]
    assert plan.digest() == build_plan("same", spec, environ=ENV).digest()  # the same plan, no trace of the pins
    assert "--speculative-num-steps" not in plan.flags


def test_a_pinned_point_sglang_refuses_is_reported_as_the_rules_report_it_naming_the_profile(user):
    root = user({"bad.toml": profile_toml("bad", extends="fused")
                 + "[spec_params]\nsteps = 3\ntopk = 1\ndraft_tokens = 5\n",
                 "same.toml": profile_toml("same", extends="fused")})
    _, findings = plans.evaluate("bad", "eagle3", environ=ENV)
    _, explicit = plans.evaluate("same", "eagle3", environ=ENV, spec_params="3,1,5")
    got = [f for f in findings if f.rule == "eagle_spec_params"]
    want = [f for f in explicit if f.rule == "eagle_spec_params"]
    assert [(f.level, f.message) for f in got] == [(f.level, f.message) for f in want] and got
    assert got[0].file == root / "bad.toml" and got[0].key == "spec_params.draft_tokens"
    with pytest.raises(UserError) as exc:
        build_plan("bad", "eagle3", environ=ENV)
    assert f"{root / 'bad.toml'}: key 'spec_params.draft_tokens': EAGLE point (3,1,5): with top-k 1" in str(exc.value)
    assert build_plan("bad", "off", environ=ENV).spec_params is None  # not EAGLE: the pin is not judged


def test_a_pinned_tree_point_meets_the_backend_rule_naming_the_profile(user):
    root = user({"tree.toml": profile_toml("tree", extends="fused", server={"attention-backend": "trtllm_mha"})
                 + "[spec_params]\nsteps = 2\ntopk = 2\ndraft_tokens = 4\n"})
    with pytest.raises(UserError) as exc:
        build_plan("tree", "eagle3", environ=ENV)
    assert f"{root / 'tree.toml'}: key 'spec_params.topk': EAGLE point (steps, topk, draft_tokens) = (2,2,4): " \
        "the trtllm_mha attention backend only supports top-k 1" in str(exc.value)


def test_a_point_given_as_an_option_is_blamed_on_the_option_not_the_spec_overlay(user):
    user({"tree.toml": profile_toml("tree", extends="fused", server={"attention-backend": "trtllm_mha"})})
    with pytest.raises(UserError) as exc:
        build_plan("tree", "eagle3", environ=ENV, spec_params="2,2,4")
    assert str(exc.value).startswith("--spec-params 2,2,4: EAGLE point (steps, topk, draft_tokens) = (2,2,4): "
                                     "the trtllm_mha attention backend only supports top-k 1"), str(exc.value)
    assert "spec/eagle3.toml" not in str(exc.value)


def test_split_local_takes_each_local_flag_with_its_value():
    setup, local = plans.split_local(["--model-path", "/m", "--tp-size", "8", "--trust-remote-code", "--port", "1"])
    assert setup == ["--tp-size", "8", "--trust-remote-code"]
    assert local == {"model-path": "/m", "port": "1"}
