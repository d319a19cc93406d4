"""launcher.profiles.loader: profile files, schema, discovery, `extends`, base.toml first, spec overlay then model overlay last, `false` unsets."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from helpers_profiles import BUILTIN, clean_env, profile_toml, write_profiles

from launcher.errors import UserError
from launcher.profiles import listing
from launcher.profiles import loader as profiles


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


@pytest.fixture
def builtin(tmp_path, monkeypatch) -> Path:
    """An isolated built-in folder with a base and two spec overlays."""
    root = write_profiles(
        tmp_path / "builtin",
        {
            "base.toml": profile_toml(
                "base",
                env={"BASE_ONLY": "b", "SHARED": "base"},
                server={"model-path": "/m", "port": 1, "host": "h"},
            ),
            "spec/on.toml": profile_toml("spec on", server={"port": 3, "speculative-algorithm": "EAGLE3"}),
            "spec/off.toml": profile_toml("spec off"),
        },
    )
    monkeypatch.setenv("KIT_BUILTIN_PROFILES_DIR", str(root))
    return root


def user_dir(tmp_path: Path, monkeypatch, files: dict[str, str], name: str = "user") -> Path:
    root = write_profiles(tmp_path / name, files)
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
    return root


# ---- extends, merging, false ------------------------------------------------------------------


def test_extends_chain_merges_env_and_server_child_wins(builtin):
    write_profiles(
        builtin,
        {
            "grand.toml": profile_toml(
                "g", env={"G": "g", "X": "grand"}, server={"g-flag": True, "x-flag": "grand"}
            ),
            "parent.toml": profile_toml(
                "p", extends="grand", env={"P": "p", "X": "parent"}, server={"x-flag": "parent"}
            ),
            "child.toml": profile_toml("c", extends="parent", env={"X": "child"}, server={"c-flag": 7}),
        },
    )
    res = profiles.load("child")
    assert res.env == {"BASE_ONLY": "b", "SHARED": "base", "G": "g", "X": "child", "P": "p"}
    assert res.server["x-flag"] == "parent"
    assert res.server["g-flag"] is True
    assert res.server["c-flag"] == 7
    assert [p.stem for p in res.chain] == ["base", "grand", "parent", "child"]
    assert res.origin["env.X"] == builtin / "child.toml"
    assert res.origin["server.x-flag"] == builtin / "parent.toml"
    assert res.origin["env.BASE_ONLY"] == builtin / "base.toml"
    assert res.description == "c"


def test_false_unsets_inherited_env_and_server_keys(builtin):
    write_profiles(
        builtin,
        {
            "parent.toml": profile_toml(
                "p", env={"DROP": "1", "KEEP": "1"}, server={"drop-flag": True, "keep-flag": 2}
            ),
            "child.toml": profile_toml(
                "c",
                extends="parent",
                env={"DROP": False, "SHARED": False},
                server={"drop-flag": False, "host": False},
            ),
        },
    )
    res = profiles.load("child")
    assert "DROP" not in res.env and "SHARED" not in res.env  # from the parent and from base.toml
    assert res.env["KEEP"] == "1"
    assert "drop-flag" not in res.server and "host" not in res.server
    assert res.server["keep-flag"] == 2


def test_zero_is_a_value_not_an_unset(builtin):
    write_profiles(builtin, {"p.toml": profile_toml("p", env={"NCCL_CUMEM_ENABLE": 0})})
    assert profiles.load("p").env["NCCL_CUMEM_ENABLE"] == 0


def test_requires_merge_child_overrides_fields(builtin):
    write_profiles(
        builtin,
        {
            "parent.toml": profile_toml(
                "p", requires={"interconnect": "pcie", "p2p": True, "patches": ["a"]}
            ),
            "child.toml": profile_toml("c", extends="parent", requires={"patches": [], "sm": ["12.0"]}),
        },
    )
    req = profiles.load("child").requires
    assert req.interconnect == "pcie" and req.p2p is True
    assert req.patches == [] and req.sm == ["12.0"]


def test_base_first_profile_next_spec_last(builtin):
    write_profiles(builtin, {"p.toml": profile_toml("p", server={"port": 2, "host": "mine"})})
    res = profiles.load("p")
    assert res.server["port"] == 2  # profile over base
    assert res.server["model-path"] == "/m"  # base key kept
    profiles.apply_spec(res, "on")
    assert res.server["port"] == 3  # spec overlay over profile
    assert res.server["host"] == "mine"
    assert res.server["speculative-algorithm"] == "EAGLE3"
    assert res.chain[0] == builtin / "base.toml"
    assert res.chain[-1] == builtin / "spec" / "on.toml"
    assert res.origin["server.port"] == builtin / "spec" / "on.toml"


def test_unknown_spec_mode_lists_known(builtin):
    write_profiles(builtin, {"p.toml": profile_toml("p")})
    res = profiles.load("p")
    with pytest.raises(UserError) as exc:
        profiles.apply_spec(res, "medusa")
    assert "medusa" in str(exc.value)
    assert "off, on" in str(exc.value)


def test_real_profiles_inherit_nccl_tuned():
    res = profiles.load("fused")
    assert [p.stem for p in res.chain] == ["base", "nccl-tuned", "fused"]
    assert res.env["NCCL_PROTO"] == "LL"  # from nccl-tuned
    assert res.server["flashinfer-allreduce-fusion-backend"] == "trtllm"
    assert res.server["trust-remote-code"] is True  # from base.toml
    assert res.requires.patches == ["sm120-allreduce-fusion"]
    assert res.requires.p2p is True  # inherited from nccl-tuned
    assert res.origin["env.NCCL_PROTO"] == BUILTIN / "nccl-tuned.toml"


# ---- [spec_params] ------------------------------------------------------------------------------


def _pins(steps: object = 2, topk: object = 1, draft_tokens: object = 3) -> str:
    return f"[spec_params]\nsteps = {steps}\ntopk = {topk}\ndraft_tokens = {draft_tokens}\n"


def test_spec_params_are_inherited_through_extends_child_wins_with_origin(builtin):
    from launcher.profiles.spec_params import SpecParams

    write_profiles(builtin, {
        "parent.toml": profile_toml("p") + _pins(2, 1, 3),
        "child.toml": profile_toml("c", extends="parent"),
        "grandchild.toml": profile_toml("g", extends="child") + _pins(1, 1, 2),
        "plain.toml": profile_toml("x"),
    })
    child = profiles.load("child")
    assert child.spec_params == SpecParams(steps=2, topk=1, draft_tokens=3)
    assert child.origin["spec_params"] == builtin / "parent.toml"
    grandchild = profiles.load("grandchild")
    assert grandchild.spec_params == SpecParams(steps=1, topk=1, draft_tokens=2)
    assert grandchild.origin["spec_params"] == builtin / "grandchild.toml"
    plain = profiles.load("plain")
    assert plain.spec_params is None and "spec_params" not in plain.origin
    profiles.apply_spec(child, "on")  # an overlay leaves the profile's pin alone (plan.evaluate lays it)
    assert child.spec_params == SpecParams(steps=2, topk=1, draft_tokens=3)


@pytest.mark.parametrize(("folder", "kind"), [("spec/on.toml", "spec overlay"), ("model/m.toml", "model overlay")])
def test_overlays_refuse_a_spec_params_table_naming_the_file(builtin, folder, kind):
    write_profiles(builtin, {"p.toml": profile_toml("p"), folder: profile_toml("o") + _pins()})
    res = profiles.load("p")
    with pytest.raises(UserError) as exc:
        profiles.apply_spec(res, "on") if kind == "spec overlay" else profiles.apply_model_overlay(res, "m")
    msg = str(exc.value)
    assert f"{builtin / folder}: key 'spec_params': a {kind} may not hold a [spec_params] table" in msg
    assert "own [server] keys" in msg and "remove the table" in msg


@pytest.mark.parametrize(("table", "key", "words"), [
    (_pins(steps=0), "spec_params.steps", "greater than or equal to 1"),
    (_pins(topk='"2"'), "spec_params.topk", "valid integer"),
    (_pins(draft_tokens=2.0), "spec_params.draft_tokens", "valid integer"),
    (_pins(steps="true"), "spec_params.steps", "valid integer"),
    (_pins(steps=2000), "spec_params.steps", "less than or equal to 1024"),
    (_pins() + "accept = 3\n", "spec_params.accept", "remove it; [spec_params] holds steps, topk and draft_tokens"),
    ("[spec_params]\nsteps = 2\ntopk = 1\n", "spec_params.draft_tokens", "Field required"),
    ('spec_params = "2,1,3"\n', "spec_params", "whole numbers from 1 to 1024"),
])
def test_bad_spec_params_name_file_and_key(tmp_path, monkeypatch, table, key, words):
    root = user_dir(tmp_path, monkeypatch, {"bad.toml": 'description = "x"\n' + table})
    with pytest.raises(UserError) as exc:
        profiles.load("bad")
    msg = str(exc.value)
    assert msg.startswith(f"{root / 'bad.toml'}: key '{key}': ") and words in msg


def test_a_bad_spec_params_table_is_exit_2_from_the_cli(tmp_path, monkeypatch, capsys):
    from launcher.cli import main as launcher_main

    root = user_dir(tmp_path, monkeypatch, {"bad.toml": profile_toml("x", extends="fused") + _pins(steps=0)})
    assert launcher_main(["show", "bad", "--spec", "eagle3"]) == 2
    assert f"{root / 'bad.toml'}: key 'spec_params.steps'" in capsys.readouterr().err


# ---- model overlays -----------------------------------------------------------------------------


def test_model_overlay_is_laid_last_over_profile_and_spec(builtin):
    write_profiles(builtin, {
        "p.toml": profile_toml("p", env={"SHARED": "profile"}, server={"port": 2}),
        "model/m.toml": profile_toml("m", env={"SHARED": "model"},
                                     server={"port": 4, "tool-call-parser": "kimi_k2", "host": False}),
    })
    res = profiles.load("p")
    profiles.apply_spec(res, "on")
    profiles.apply_model_overlay(res, "m")
    assert res.server["port"] == 4 and res.server["tool-call-parser"] == "kimi_k2"  # over the spec's 3
    assert "host" not in res.server  # false drops a key, as in every overlay
    assert res.env["SHARED"] == "model" and res.env["BASE_ONLY"] == "b"
    assert res.chain[-2:] == [builtin / "spec" / "on.toml", builtin / "model" / "m.toml"]
    assert res.origin["server.tool-call-parser"] == builtin / "model" / "m.toml"
    assert res.description == "p"  # the profile's own description stays


def test_unknown_model_overlay_names_it_the_known_ones_and_the_setting(builtin):
    write_profiles(builtin, {"p.toml": profile_toml("p"), "model/kimi.toml": profile_toml("k"),
                             "model/dsv3.toml": profile_toml("d")})
    assert profiles.model_overlays() == ["dsv3", "kimi"]
    with pytest.raises(UserError) as exc:
        profiles.apply_model_overlay(profiles.load("p"), "kimi-k9")
    msg = str(exc.value)
    assert "unknown model overlay 'kimi-k9'" in msg and "dsv3, kimi" in msg and "MODEL_OVERLAY" in msg
    with pytest.raises(UserError, match=r"model overlay name '\.\./p' is not valid"):
        profiles.apply_model_overlay(profiles.load("p"), "../p")


@pytest.mark.parametrize("extra", ['extends = "p"\n', 'status = "stable"\n', '[requires]\np2p = true\n',
                                   '[expects]\nfusion = true\n'])
def test_a_model_overlay_holds_description_env_and_server_only(builtin, extra):
    key = extra.split()[0].strip("[]")
    write_profiles(builtin, {"p.toml": profile_toml("p"), "model/m.toml": 'description = "m"\n' + extra})
    with pytest.raises(UserError, match=rf"model/m.toml: key '{key}': a model overlay holds only description"):
        profiles.apply_model_overlay(profiles.load("p"), "m")


def test_a_model_overlay_needs_a_description_and_obeys_the_profile_rules(builtin):
    write_profiles(builtin, {"p.toml": profile_toml("p"), "model/bare.toml": "[server]\nx = 1\n",
                             "model/path.toml": profile_toml("m", env={"PATH": "/evil"}),
                             "model/dash.toml": profile_toml("m", server={"--tool-call-parser": "kimi_k2"})})
    with pytest.raises(UserError, match=r"bare.toml: key 'description' is missing"):
        profiles.apply_model_overlay(profiles.load("p"), "bare")
    with pytest.raises(UserError, match=r"path.toml: key 'env.PATH': a profile may not set it"):
        profiles.apply_model_overlay(profiles.load("p"), "path")
    with pytest.raises(UserError, match=r"dash.toml: key 'server.--tool-call-parser': write the flag without"):
        profiles.apply_model_overlay(profiles.load("p"), "dash")


def test_model_overlays_in_a_user_folder_are_known_and_shadow_builtins(builtin, tmp_path, monkeypatch):
    write_profiles(builtin, {"p.toml": profile_toml("p"), "model/kimi.toml": profile_toml("built-in", server={"a": 1})})
    user = user_dir(tmp_path, monkeypatch, {"model/kimi.toml": profile_toml("mine", server={"a": 2}),
                                            "model/mine.toml": profile_toml("m")})
    assert profiles.model_overlays() == ["kimi", "mine"]
    res = profiles.load("p")
    profiles.apply_model_overlay(res, "kimi")
    assert res.server["a"] == 2 and res.chain[-1] == user / "model" / "kimi.toml"
    assert "kimi" not in profiles.available_names() and "model" not in profiles.available_names()


def test_builtin_model_overlays_set_the_models_parsers():
    assert {"kimi-k2", "deepseek-v3"} <= set(profiles.model_overlays())
    kimi = profiles.read_model_overlay(BUILTIN / "model" / "kimi-k2.toml")
    assert kimi.server == {"tool-call-parser": "kimi_k2", "reasoning-parser": "kimi_k2"} and kimi.env == {}
    # The attention backend stays SGLang's (triton for MLA on SM120): the file says why, sets nothing.
    text = (BUILTIN / "model" / "kimi-k2.toml").read_text()
    assert "attention-backend" not in kimi.server and "trtllm_mla" in text and "docs/evidence.md" in text
    dsv3 = profiles.read_model_overlay(BUILTIN / "model" / "deepseek-v3.toml")
    assert dsv3.server == {"tool-call-parser": "deepseekv3"}


# ---- discovery ----------------------------------------------------------------------------------


def test_kit_profiles_dir_is_colon_separated_and_shadows_builtins(tmp_path, monkeypatch):
    first = write_profiles(
        tmp_path / "first", {"fused.toml": profile_toml("first fused"), "mine.toml": profile_toml("m1")}
    )
    second = write_profiles(
        tmp_path / "second",
        {"mine.toml": profile_toml("m2"), "other.toml": profile_toml("o", extends="fused")},
    )
    monkeypatch.setenv("KIT_PROFILES_DIR", f"{first}::{second}")
    assert profiles.search_dirs() == [first, second, BUILTIN]
    names = profiles.available_names()
    assert {"fused", "mine", "other", "baseline", "symm-mem"} <= set(names)
    assert "base" not in names
    assert profiles.load("fused").description == "first fused"
    assert profiles.load("fused").path == first / "fused.toml"
    assert profiles.load("mine").description == "m1"  # the first folder wins
    # `extends` resolves through the same search order: the user's fused, not the built-in one.
    assert profiles.load("other").chain[-2] == first / "fused.toml"


def test_spec_modes_in_a_user_folder_are_known_and_shadow_builtins(builtin, tmp_path, monkeypatch):
    """A user folder's spec/ holds spec modes, as the Makefile has always assumed."""
    user = user_dir(
        tmp_path,
        monkeypatch,
        {
            "p.toml": profile_toml("p"),
            "spec/quick.toml": profile_toml("quick", server={"speculative-num-steps": 2}),
            "spec/on.toml": profile_toml("my on", server={"port": 9}),
        },
    )
    assert profiles.spec_modes() == ["off", "on", "quick"]
    res = profiles.load("p")
    profiles.apply_spec(res, "quick")
    assert res.server["speculative-num-steps"] == 2 and res.chain[-1] == user / "spec" / "quick.toml"
    res = profiles.load("p")
    profiles.apply_spec(res, "on")
    assert res.server["port"] == 9  # the user's file wins over the built-in one
    with pytest.raises(UserError, match=r"known: off, on, quick") as exc:
        profiles.apply_spec(profiles.load("p"), "medusa")
    assert str(user) in str(exc.value)


def test_user_base_toml_shadows_builtin_base(tmp_path, monkeypatch):
    user_dir(
        tmp_path,
        monkeypatch,
        {"base.toml": profile_toml("my base", env={"MINE": "1"}), "p.toml": profile_toml("p")},
    )
    res = profiles.load("p")
    assert res.env == {"MINE": "1"}
    assert "model-path" not in res.server


def test_describe_all_lists_every_profile_with_status(tmp_path, monkeypatch):
    user_dir(tmp_path, monkeypatch, {"new.toml": profile_toml("brand new")})
    rows = {r.name: r.wire() for r in listing.describe_all()}
    builtin_names = {p.stem for p in BUILTIN.glob("*.toml")} - {"base"}
    assert set(rows) == builtin_names | {"new"}
    assert rows["new"]["status"] == "experimental"  # the default when status is omitted
    assert rows["new"]["description"] == "brand new"
    for name in builtin_names:
        raw = tomllib.loads((BUILTIN / f"{name}.toml").read_text())
        assert rows[name]["description"] == raw["description"]
        assert rows[name]["status"] == raw["status"]


def test_unknown_profile_lists_known_names():
    with pytest.raises(UserError) as exc:
        profiles.load("nope")
    msg = str(exc.value)
    assert "unknown profile 'nope'" in msg
    for name in ("baseline", "custom-ar", "fused", "nccl-tuned", "symm-mem"):
        assert name in msg


def test_base_is_not_a_profile():
    with pytest.raises(UserError, match="unknown profile 'base'"):
        profiles.load("base")


# ---- schema errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('description = "x"\nstatus = \n', 2),
        ('description = "x"\n[env\nA = 1\n', 2),
        ('description = "x"\n\n[env]\nA = "unterminated\n', 4),
        ('description = "x"\n[env]\nA = 1\nA = 2\n', 4),
    ],
)
def test_toml_syntax_error_has_file_and_line(tmp_path, monkeypatch, text, line):
    root = user_dir(tmp_path, monkeypatch, {"bad.toml": text})
    with pytest.raises(UserError) as exc:
        profiles.load("bad")
    assert f"{root / 'bad.toml'}:{line}:" in str(exc.value)
    assert "TOML syntax error" in str(exc.value)


def test_bug_toml_line_number_lost_when_message_says_newline(tmp_path, monkeypatch):
    """tomllib's "Expected newline or end of document ... (at line 3, ...)" must still give file:3."""
    root = user_dir(tmp_path, monkeypatch, {"bad.toml": 'description = "x"\n[env]\nA = "1" B = "2"\n'})
    with pytest.raises(UserError) as exc:
        profiles.load("bad")
    assert f"{root / 'bad.toml'}:3:" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "key", "unknown"),
    [
        ('description = "x"\nstatuss = "stable"\n', "statuss", True),
        ('description = "x"\n[servers]\ntp-size = 8\n', "servers", True),
        ('description = "x"\n[requires]\ngpu = "rtx"\n', "requires.gpu", True),
        ('description = "x"\nstatus = 3\n', "status", False),
        ('description = "x"\nstatus = "beta"\n', "status", False),
        ('description = "x"\nextends = 1\n', "extends", False),
        ('description = "x"\n[requires]\ninterconnect = "infiniband"\n', "requires.interconnect", False),
        ('description = "x"\n[requires]\nsm = "12.0"\n', "requires.sm", False),
        ('description = "x"\n[requires]\npatches = "sm120-allreduce-fusion"\n', "requires.patches", False),
        # `requires.p2p = "yes"` must be a type error, not silently True (pydantic's lax bool)
        *((f'description = "x"\n[requires]\np2p = {v}\n', "requires.p2p", False) for v in ('"yes"', "1", '"true"')),
        *((f'description = "x"\n[env]\nNCCL_ALGO = {v}\n', "env.NCCL_ALGO", False)
           for v in ("[1, 2]", "{ a = 1 }", "1979-05-27")),
    ],
)
def test_unknown_keys_and_wrong_types_name_file_and_key(tmp_path, monkeypatch, text, key, unknown):
    root = user_dir(tmp_path, monkeypatch, {"bad.toml": text})
    with pytest.raises(UserError) as exc:
        profiles.load("bad")
    msg = str(exc.value)
    assert str(root / "bad.toml") in msg
    assert f"key '{key}" in msg
    if unknown:  # an unknown key or table: named exactly, and the fix is to remove it
        assert f"key '{key}'" in msg and "remove it" in msg


def test_flag_written_with_dashes_is_an_error(tmp_path, monkeypatch):
    user_dir(tmp_path, monkeypatch, {"bad.toml": 'description = "x"\n[server]\n"--tp-size" = 8\n'})
    with pytest.raises(UserError, match="without leading dashes, e.g. 'tp-size'"):
        profiles.load("bad")


def test_missing_description_is_an_error(tmp_path, monkeypatch):
    root = user_dir(tmp_path, monkeypatch, {"nodesc.toml": profile_toml(None, extends="fused")})
    with pytest.raises(UserError) as exc:
        profiles.load("nodesc")
    assert str(root / "nodesc.toml") in str(exc.value)
    assert "description" in str(exc.value)


@pytest.mark.parametrize("text", ['description = "two\\nlines"\n', 'description = "   "\n'])
def test_description_must_be_one_non_empty_line(tmp_path, monkeypatch, text):
    user_dir(tmp_path, monkeypatch, {"bad.toml": text})
    with pytest.raises(UserError, match="key 'description'"):
        profiles.load("bad")


def test_extends_cycle_is_an_error(tmp_path, monkeypatch):
    root = user_dir(
        tmp_path,
        monkeypatch,
        {
            "a.toml": profile_toml("a", extends="b"),
            "b.toml": profile_toml("b", extends="c"),
            "c.toml": profile_toml("c", extends="a"),
        },
    )
    with pytest.raises(UserError) as exc:
        profiles.load("a")
    msg = str(exc.value)
    assert "cycle a -> b -> c -> a" in msg
    assert str(root / "c.toml") in msg and "'extends'" in msg


def test_self_extends_is_a_cycle(tmp_path, monkeypatch):
    user_dir(tmp_path, monkeypatch, {"a.toml": profile_toml("a", extends="a")})
    with pytest.raises(UserError, match="cycle a -> a"):
        profiles.load("a")


@pytest.mark.parametrize("parent", ["does-not-exist", "base"])
def test_unknown_parent_is_an_error(tmp_path, monkeypatch, parent):
    root = user_dir(tmp_path, monkeypatch, {"kid.toml": profile_toml("kid", extends=parent)})
    with pytest.raises(UserError) as exc:
        profiles.load("kid")
    msg = str(exc.value)
    assert str(root / "kid.toml") in msg
    assert f"unknown parent profile '{parent}'" in msg
    assert re.search(r"known: .*nccl-tuned", msg)


def test_every_builtin_profile_loads_with_description_and_status():
    for name in profiles.available_names():
        res = profiles.load(name)
        assert res.description and "\n" not in res.description
        assert res.status in ("stable", "experimental")
        assert res.chain[0] == BUILTIN / "base.toml"


def test_every_file_and_evidence_section_the_profiles_cite_is_in_the_repo():
    """Profile values cite their evidence; a citation must lead somewhere inside this repository."""
    repo = BUILTIN.parent
    sections = set(re.findall(r"^## (.+)$", (repo / "docs" / "evidence.md").read_text(), re.M))
    cited_sections = 0
    for path in sorted(BUILTIN.rglob("*.toml")):
        text = path.read_text()
        for name in re.findall(r"[\w./-]+\.md\b", text):
            assert (repo / name).is_file(), f"{path.name} cites {name}, which is not a file of this repository"
        for section in re.findall(r'docs/evidence\.md, "([^"]+)"', text.replace("\n# ", " ")):
            assert section in sections, f'{path.name} cites docs/evidence.md, "{section}", which has no such section'
            cited_sections += 1
    assert cited_sections >= 10


# ---- hostile files: one damaged profile never takes a listing down ----------------------------------------------


def _damaged() -> dict[str, str]:
    return {
        "bigkey.toml": profile_toml("k", extends="baseline") + '[adaptive_tiers]\n"' + "1" * 5000 + '" = [1]\n',
        "deep.toml": 'description = "d"\n[env]\nA = ' + "[" * 5000 + "]" * 5000 + "\n",
        "bigint.toml": 'description = "i"\n[env]\nA = ' + "1" * 5000 + "\n",
        "self.toml": profile_toml("s", extends="self"),
        "orphan.toml": profile_toml("o", extends="self"),  # its parent is damaged
        "strstep.toml": profile_toml("t") + '[adaptive_tiers]\n1 = ["3"]\n',
        "huge.toml": 'description = "' + "d" * 5_000_000 + '"\n',
        "newline.toml": 'description = "x"\n[server]\n"a\\u001b[31mb" = 1\n',
        "Ünï.toml": profile_toml("u"),
        "good.toml": profile_toml("fine", extends="baseline"),
        "wordy.toml": profile_toml("w" * 900),
    }


def test_bug_6_damaged_user_profiles_are_listed_invalid_with_one_short_reason(tmp_path, monkeypatch):
    """Defect 6: a 5000-digit [adaptive_tiers] key (ValueError) or a 5000-deep array (RecursionError) was a
    traceback for every listing; a self-extending profile was listed `experimental`, a unicode-named one not at
    all, a 5 MB description printed whole."""
    root = user_dir(tmp_path, monkeypatch, _damaged())
    rows = {r.name: r.wire() for r in listing.describe_all()}
    invalid = {"bigkey", "deep", "bigint", "self", "orphan", "strstep", "huge", "newline", "Ünï"}
    assert {n for n, r in rows.items() if r["status"] == "invalid"} == invalid
    for name in invalid:
        error = rows[name]["error"]
        assert len(error) <= listing.REASON_SHOWN and error.isprintable(), (name, error)
    assert "no batch size" in rows["bigkey"]["error"] and "nested too deeply" in rows["deep"]["error"]
    assert "cycle self -> self" in rows["self"]["error"] and "self.toml" in rows["orphan"]["error"]
    assert "candidate steps must be whole numbers" in rows["strstep"]["error"]
    assert "larger than 1 MiB" in rows["huge"]["error"] and "not a profile name" in rows["Ünï"]["error"]
    assert rows["Ünï"]["path"] == str(root / "Ünï.toml")
    assert rows["good"] == {"name": "good", "description": "fine", "status": "experimental", "path": str(root / "good.toml")}
    assert len(rows["wordy"]["description"]) == listing.DESCRIPTION_SHOWN and rows["wordy"]["description"].endswith("...")
    assert rows["baseline"]["status"] == "stable"  # the built-ins still list
    assert profiles.load("wordy").description == "w" * 900  # the plan keeps it whole


def test_bug_6_nothing_a_file_holds_raises_from_a_listing(tmp_path, monkeypatch):
    user_dir(tmp_path, monkeypatch, {"odd.toml": profile_toml("o")})

    def explode(name):
        raise RuntimeError("boom")

    monkeypatch.setattr(listing, "load", explode)
    row = listing.describe_one("odd")
    assert row.status == "invalid" and "cannot be read (RuntimeError)" in row.error


@pytest.mark.parametrize(("body", "words"), [
    ('[env]\nA = ' + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("[env]\nA = " + "1" * 5000 + "\n", "TOML value cannot be read"),
    ('[adaptive_tiers]\n"' + "9" * 5000 + '" = [1]\n', "is no batch size from 1 to 65536"),
    ('[adaptive_tiers]\n1 = [true]\n', "candidate steps must be whole numbers"),
    ('[adaptive_tiers]\n1 = [1.0]\n', "candidate steps must be whole numbers"),
    ("[adaptive_tiers]\n1 = 3\n", "candidate steps must be whole numbers"),
    ("adaptive_tiers = 3\n", "must be an object of tiers"),
])
def test_bug_6_a_hostile_file_is_a_user_error_naming_it(tmp_path, monkeypatch, body, words):
    root = user_dir(tmp_path, monkeypatch, {"bad.toml": profile_toml("b", extends="baseline") + body})
    with pytest.raises(UserError, match=words) as exc:
        profiles.load("bad")
    assert str(root / "bad.toml") in str(exc.value) and len(str(exc.value)) < 500


def test_a_file_over_the_cap_is_refused_unread_and_one_at_it_is_read(tmp_path, monkeypatch):
    head = profile_toml("c") + "# "
    fits = head + "x" * (profiles.MAX_FILE_BYTES - len(head) - 1) + "\n"
    user_dir(tmp_path, monkeypatch, {"fits.toml": fits, "over.toml": fits + "\n"})
    assert profiles.load("fits").description == "c"
    with pytest.raises(UserError, match="larger than 1 MiB"):
        profiles.load("over")


def test_a_description_over_its_cap_is_refused(tmp_path, monkeypatch):
    user_dir(tmp_path, monkeypatch, {"long.toml": profile_toml("d" * (profiles.DESCRIPTION_MAX + 1))})
    with pytest.raises(UserError, match=f"key 'description'.*at most {profiles.DESCRIPTION_MAX} characters"):
        profiles.load("long")
