"""launcher/profiles/adaptive_tiers.py: a tuned --speculative-adaptive-config as a record of a plan. Its forms,
its checks (SGLang 0.5.23's and the kit's), the file SGLang reads (agreeing with SGLang's own loader and router),
and how a plan carries it: the API's record or a profile's [adaptive_tiers] table, eagle3-adaptive only,
written into the state dir when the plan is rendered, its content in both digests."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers_profiles import ENV, REPO, child_env
from pydantic import ValidationError

from launcher.errors import UserError
from launcher.profiles import adaptive_tiers as at
from launcher.profiles import plan as plans
from launcher.profiles import tier_routing as tr
from launcher.profiles.render import write_plan

MODE = "eagle3-adaptive"


def _value(flags: list[str], flag: str) -> str:
    return flags[flags.index(flag) + 1]


# ---- the record ------------------------------------------------------------------------------------


def test_the_three_forms_agree():
    t = at.parse("16:0,1:3,4:1/2")
    assert t.tiers == ((1, (3,)), (4, (1, 2)), (16, (0,)))  # by batch size, steps sorted
    assert t.text() == "1:3,4:1/2,16:0" and t.label() == "[1:3,4:1/2,16:0]"
    assert t.to_json() == {"1": [3], "4": [1, 2], "16": [0]}
    assert at.from_json(t.to_json()) == t == at.coerce(t.text()) == at.coerce(t.to_json())
    assert t.sglang_config() == {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1, 2]},
                                 "16": {"candidate_steps": [0]}}


@pytest.mark.parametrize("text, words", [
    ("", "B:S"),
    ("1:3,x:1", "B:S"),
    ("1:-1", "B:S"),
    ("0:3", "no batch size"),
    ("1:3,1:2", "given twice"),
    ("1:2000", "from 0 to 1024"),
    ("1:0,8:0", "every tier has 0 steps"),
])
def test_bad_tiers_are_refused_naming_the_flag(text, words):
    with pytest.raises(UserError, match=words) as exc:
        at.parse(text)
    assert str(exc.value).startswith("--adaptive-tiers")


@pytest.mark.parametrize("value, words", [
    ({"1": 3}, "candidate steps must be whole numbers"),
    ({"one": [3]}, "no batch size"),
    ({"1": [True]}, "candidate steps must be whole numbers"),
    ({"1": []}, "at least one"),
    ({}, "no tier"),
    ([3], "must be an object"),
])
def test_bad_json_is_refused_naming_where(value, words):
    with pytest.raises(UserError, match=words) as exc:
        at.from_json(value, "adaptive_tiers")
    assert str(exc.value).startswith("adaptive_tiers")


def test_a_batch_runs_the_largest_tier_at_or_below_it_and_the_start_is_a_candidate():
    t = at.parse("1:3,4:1,16:0")
    assert [t.steps_for(b) for b in (1, 3, 4, 15, 16, 500)] == [(3,), (3,), (1,), (1,), (0,), (0,)]
    assert at.parse("2:1,8:0").steps_for(1) == (1,)  # below the lowest tier: the lowest
    assert t.start_point().values() == (3, 1, 4)  # top-k 1, draft tokens steps + 1
    assert at.parse("1:0,4:2").start_point().values() == (2, 1, 3)  # tier 1 does not speculate: the first that does
    assert t.start_point().steps in t.union()


def test_from_levels_keys_one_tier_per_level():
    t = tr.from_levels({1: 2, 4: 1, 16: 0})
    assert t.to_json() == {"1": [2], "4": [1], "16": [0]}
    with pytest.raises(UserError, match="every tier has 0 steps"):
        tr.from_levels({1: 0, 4: 0})


def test_sglang_loads_the_file_and_routes_each_batch_to_the_tier_the_kit_names(tmp_path):
    """SGLang 0.5.23's own loader and router (adaptive_spec_params.py:103-139, 275-358) on the written file."""
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams, _load_adaptive_config

    t = at.parse("1:3,4:1,16:0")
    path = t.write(tmp_path)
    assert path.name == f"{t.sha()}.json" and json.loads(path.read_text()) == t.sglang_config()
    _, tiers = _load_adaptive_config(str(path))
    assert {b: e["candidate_steps"] for b, e in tiers.items()} == {1: [3], 4: [1], 16: [0]}
    params = AdaptiveSpeculativeParams(initial_steps=t.start_point().steps, cfg_path=str(path))
    assert params.candidate_steps == t.union()
    for batch in (1, 2, 3, 4, 5, 15, 16, 17, 300):
        assert (params.get_steps_for_batch(batch),) == t.steps_for(batch), batch


def test_write_keeps_a_file_that_holds_the_content(tmp_path):
    t = at.parse("1:2,8:0")
    path = t.write(tmp_path)
    before = path.stat().st_mtime_ns
    assert t.write(tmp_path) == path and path.stat().st_mtime_ns == before
    assert path.stat().st_mode & 0o777 == 0o600  # as the plan's own files


def test_write_replaces_a_link_with_the_file_and_never_touches_its_target(tmp_path):
    t = at.parse("1:2,8:0")
    target = tmp_path / "elsewhere.json"
    target.write_text(t.file_text())  # the right content, behind a link: still not the kit's file
    (tmp_path / "configs").mkdir()
    path = t.path(tmp_path / "configs")
    path.symlink_to(target)
    assert t.write(tmp_path / "configs") == path
    assert not path.is_symlink() and path.read_text() == t.file_text() and target.read_text() == t.file_text()


# ---- in a plan -------------------------------------------------------------------------------------


def _env(tmp_path) -> dict[str, str]:
    return {**ENV, "KIT_STATE_DIR": str(tmp_path)}


def test_a_stored_plan_reads_its_tiers_back_as_the_record_and_refuses_damaged_ones(tmp_path):
    plan = plans.build_plan("baseline", MODE, environ=_env(tmp_path), adaptive_tiers={"1": [2], "4": [1], "16": [0]})
    stored = json.loads(json.dumps(plan.to_json()))
    again = plans.Plan.from_json(stored)
    assert again.adaptive_tiers == at.parse("1:2,4:1,16:0") and again.digest() == plan.digest()
    for damaged in ({"1": ["2"]}, {"x": [1]}, [1, 2], {}):
        with pytest.raises(ValidationError, match="adaptive_tiers"):
            plans.Plan.from_json({**stored, "adaptive_tiers": damaged})
    assert plans.Plan.from_json({k: v for k, v in stored.items() if k != "adaptive_tiers"}).adaptive_tiers is None


def test_a_plan_carries_the_tiers_as_a_state_dir_file_and_starts_from_them(tmp_path):
    plan = plans.build_plan("baseline", MODE, environ=_env(tmp_path), adaptive_tiers={"1": [2], "4": [1], "16": [0]})
    path = _value(plan.flags, "--speculative-adaptive-config")
    assert path == str(tmp_path / "adaptive" / f"{at.parse('1:2,4:1,16:0').sha()}.json")
    assert plan.spec_params.values() == (2, 1, 3)  # the tiers' start, not the overlay's 3,1,4 (not a candidate)
    assert plan.adaptive_tiers == at.parse("1:2,4:1,16:0")
    assert plan.to_json()["adaptive_tiers"] == {"1": [2], "4": [1], "16": [0]}
    assert not (tmp_path / "adaptive").exists()  # building a plan writes nothing: rendering it does
    write_plan(tmp_path / "state", plan)
    assert json.loads(open(path).read()) == {"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [1]},
                                             "16": {"candidate_steps": [0]}}
    assert plans.flag_files(plan.flags) == plan.files  # the file holds what the digest hashed


def test_the_digest_is_the_tiers_content_wherever_the_file_lies(tmp_path):
    one = plans.build_plan("baseline", MODE, environ=_env(tmp_path / "a"), adaptive_tiers="1:2,4:0")
    two = plans.build_plan("baseline", MODE, environ=_env(tmp_path / "b"), adaptive_tiers={"1": [2], "4": [0]})
    other = plans.build_plan("baseline", MODE, environ=_env(tmp_path / "a"), adaptive_tiers="1:2,4:1")
    shipped = plans.build_plan("baseline", MODE, environ=_env(tmp_path / "a"))
    assert one.digest() == two.digest() and one.setup_digest() == two.setup_digest()
    assert len({one.digest(), other.digest(), shipped.digest()}) == 3
    assert "adaptive_tiers" not in shipped.to_json()


def test_tiers_outside_eagle3_adaptive_and_a_start_outside_them_are_refused(tmp_path):
    with pytest.raises(UserError, match="eagle3-adaptive only"):
        plans.build_plan("baseline", "eagle3", environ=_env(tmp_path), adaptive_tiers="1:2")
    with pytest.raises(UserError, match="not one of the adaptive config's candidate steps"):
        plans.build_plan("baseline", MODE, environ=_env(tmp_path), adaptive_tiers="1:2", spec_params="3,1,4")
    plan = plans.build_plan("baseline", MODE, environ=_env(tmp_path), adaptive_tiers="1:1/3", spec_params="3,1,4")
    assert plan.spec_params.values() == (3, 1, 4)  # a start among the candidates is the caller's to give


def _user_profile(tmp_path, body: str) -> dict[str, str]:
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "tuned.toml").write_text(f'extends = "baseline"\ndescription = "t"\nstatus = "experimental"\n{body}')
    return {**_env(tmp_path), "KIT_PROFILES_DIR": str(folder)}


def test_a_profiles_table_applies_under_eagle3_adaptive_only(tmp_path, monkeypatch):
    env = _user_profile(tmp_path, "[adaptive_tiers]\n1 = [3]\n8 = [0]\n")
    monkeypatch.setenv("KIT_PROFILES_DIR", env["KIT_PROFILES_DIR"])
    plan = plans.build_plan("tuned", MODE, environ=env)
    assert plan.adaptive_tiers == at.parse("1:3,8:0") and plan.adaptive_tiers_from.endswith("tuned.toml")
    assert plan.spec_params.values() == (3, 1, 4)
    given = plans.build_plan("tuned", MODE, environ=env, adaptive_tiers="1:1,8:0")  # the API's record wins
    assert given.adaptive_tiers == at.parse("1:1,8:0") and given.adaptive_tiers_from is None
    for spec in ("eagle3", "off"):
        assert plans.build_plan("tuned", spec, environ=env).adaptive_tiers is None


def test_render_writes_the_config_into_the_state_dir_it_renders(tmp_path, monkeypatch, capsys):
    """`launcher render --state-dir D`: the plan names D's adaptive/ folder, and the config lies there, not in
    KIT_STATE_DIR's."""
    from launcher.cli import main

    env = _user_profile(tmp_path, "[adaptive_tiers]\n1 = [3]\n8 = [0]\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("KIT_STATE_DIR", str(elsewhere))
    state = tmp_path / "state"
    assert main(["render", "tuned", "--spec", MODE, "--state-dir", str(state)]) == 0
    assert capsys.readouterr().out.strip() == str(state.resolve() / "profile.json")
    argv = json.loads((state / "profile.json").read_text())["argv"]
    config = _value(argv, "--speculative-adaptive-config")
    assert config == str(state.resolve() / "adaptive" / f"{at.parse('1:3,8:0').sha()}.json")
    assert json.loads(open(config).read()) == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [0]}}
    assert not elsewhere.exists()


@pytest.mark.stack
@pytest.mark.parametrize("table, words", [
    ("[adaptive_tiers]\n1 = [0]\n", "every tier has 0 steps"),
    ("[adaptive_tiers]\nx = [1]\n", "no batch size"),
    ("[adaptive_tiers]\n1 = 2\n", "adaptive_tiers"),
])
def test_a_bad_table_is_exit_2_naming_the_file_and_key(tmp_path, table, words):
    env = _user_profile(tmp_path, table)
    r = subprocess.run([sys.executable, "-m", "launcher", "check", "tuned", "--spec", MODE], cwd=REPO,
                       env=child_env(**env), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "tuned.toml" in r.stderr and "adaptive_tiers" in r.stderr and words in r.stderr


@pytest.mark.stack
def test_an_overlay_may_not_hold_the_table(tmp_path):
    env = _user_profile(tmp_path, "")
    spec = tmp_path / "profiles" / "spec"
    spec.mkdir()
    (spec / "mine.toml").write_text('description = "m"\n[adaptive_tiers]\n1 = [3]\n')
    r = subprocess.run([sys.executable, "-m", "launcher", "check", "tuned", "--spec", "mine"], cwd=REPO,
                       env=child_env(**env), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "may not hold an [adaptive_tiers] table" in r.stderr, r.stdout + r.stderr


def _launcher(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, env=child_env(**env),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.stack
def test_launcher_show_and_check_take_tiers_and_refuse_bad_ones(tmp_path):
    env = _env(tmp_path)
    r = _launcher("show", "baseline", "--spec", MODE, "--adaptive-tiers", "1:2,4:0", env=env)
    assert r.returncode == 0, r.stderr
    assert "# adaptive tiers (batch size: steps): {'1': [2], '4': [0]}" in r.stdout
    assert f"--speculative-adaptive-config {tmp_path}/adaptive/" in r.stdout and "--speculative-num-steps 2" in r.stdout
    assert _launcher("check", "baseline", "--adaptive-tiers", "1:2,4:0", env=env).returncode == 0  # eagle3-adaptive
    for args, words in ((("--adaptive-tiers", "1:0"), "every tier has 0 steps"),
                        (("--adaptive-tiers", "1=2"), "B:S"),
                        (("--spec", "eagle3", "--adaptive-tiers", "1:2"), "eagle3-adaptive only")):
        r = _launcher("check", "baseline", *args, env=env)
        assert r.returncode == 2 and words in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "adaptive").exists()  # previews write nothing


# ---- one parser: the text form, a profile's table and the API's JSON refuse the same things in the same words ----

LONG_KEY = "1" * 5000  # past Python's int-string limit (4300 digits): int() would raise ValueError


def _problem(message: str) -> str:
    """The refusal without where it came from and the fix in the caller's form."""
    import re

    found = re.search(r": ((?:tier |no tier |every tier ).*?); give ", message)
    assert found, message
    return found.group(1)


@pytest.mark.parametrize("text, value", [
    ("²:1", {"²": [1]}),  # str.isdigit() holds, int() raises
    ("١:1", {"١": [1]}),  # an Arabic-Indic digit: int() reads 1
    (f"{LONG_KEY}:1", {LONG_KEY: [1]}),
    ("65537:1", {"65537": [1]}),
    ("0:1", {"0": [1]}),
    ("1:1.0", {"1": [1.0]}),
    ("1:true", {"1": [True]}),
    ("1:-1", {"1": [-1]}),
    ("1:1025", {"1": [1025]}),
    ("1:0", {"1": [0]}),
])
def test_bug_5_every_form_refuses_the_same_things_with_the_same_words(tmp_path, text, value):
    """Defect 5: a 5000-digit or non-ASCII key was a ValueError (a traceback, the API's 500) or read as batch 1
    by the CLI only; now the three forms go through one parser and say the same thing, each with its own fix."""
    from launcher.profiles import loader

    with pytest.raises(UserError) as cli:
        at.parse(text)
    with pytest.raises(UserError) as api:
        at.api_value(value)
    key, steps = next(iter(value.items()))
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "t.toml").write_text(f'description = "t"\n[adaptive_tiers]\n{json.dumps(key)} = {json.dumps(steps)}\n')
    with pytest.raises(UserError) as toml:
        loader.read_file(folder / "t.toml")
    assert _problem(str(cli.value)) == _problem(str(api.value)) == _problem(str(toml.value))
    assert str(cli.value).startswith("--adaptive-tiers '") and "give tiers as B:S" in str(cli.value)
    assert str(api.value).startswith("adaptive_tiers: ") and 'give tiers as {"B"' in str(api.value)
    assert "t.toml: key 'adaptive_tiers': " in str(toml.value) and "[adaptive_tiers] lines" in str(toml.value)
    assert len(str(cli.value)) < 400 and len(str(api.value)) < 400  # one short line, whatever was given


@pytest.mark.parametrize("steps", [["3"], [True], [1.0], [1, "2"], "3", 3, [], None, [[1]]])
def test_bug_5_steps_are_strict_ints_in_the_api_and_a_profile(tmp_path, steps):
    """`["3"]`, `[true]`, `[1.0]` were coerced to ints (pydantic's lax mode) where [spec_params] is strict."""
    with pytest.raises(UserError, match="candidate steps must be whole numbers from 0 to 1024, at least one"):
        at.api_value({"1": steps})


def test_the_api_field_type_hands_the_raw_json_to_the_parser():
    """ApiTiers, the type of the control API's body field: nothing coerced before the parser sees it, its UserError
    (the API's 400) passes through model_validate, None stays None."""
    from pydantic import BaseModel, ConfigDict

    class Body(BaseModel):
        model_config = ConfigDict(extra="forbid")
        adaptive_tiers: at.ApiTiers = None

    assert Body.model_validate({}).adaptive_tiers is None
    assert Body.model_validate({"adaptive_tiers": None}).adaptive_tiers is None
    assert Body.model_validate({"adaptive_tiers": {"1": [3], "8": [0]}}).adaptive_tiers == at.parse("1:3,8:0")
    for bad in ({"1": ["3"]}, {LONG_KEY: [1]}, {"²": [1]}, "1:3", [1]):
        with pytest.raises(UserError, match="^adaptive_tiers: "):
            Body.model_validate({"adaptive_tiers": bad})


def test_a_refusal_lists_a_few_problems_and_counts_the_rest():
    with pytest.raises(UserError) as exc:
        at.from_json({f"x{i}": [1] for i in range(10_000)})
    assert str(exc.value).count("no batch size") == at.PROBLEMS_SHOWN and "and 9997 more" in str(exc.value)
    assert len(str(exc.value)) < 500


def test_keys_with_leading_zeros_are_the_batch_they_name():
    assert at.parse("0001:3").tiers == ((1, (3,)),) == at.from_json({"01": [3]}).tiers
    with pytest.raises(UserError, match="tier 1 given twice"):
        at.from_json({"1": [3], "01": [2]})


@pytest.mark.parametrize("value", ["²:1", "١:1", f"{LONG_KEY}:1", "1:" + "9" * 5000])
def test_bug_5_launcher_check_refuses_a_bad_key_with_exit_2_naming_the_flag(value, capsys):
    """`launcher check --adaptive-tiers '²:1'` (or a 5000-digit batch) was a traceback with exit 1; '١:1' was
    checked as batch 1."""
    from launcher.cli import main

    assert main(["check", "baseline", "--adaptive-tiers", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --adaptive-tiers '") and "give tiers as B:S" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1 and len(err) < 400


@pytest.mark.parametrize("capture", [None, (1, 2, 4, 8, 16, 32, 48), (1, 3, 8, 64), (2, 4)])
def test_routing_pads_as_sglangs_router_and_each_key_serves_its_level(capture, tmp_path):
    """`Routing` against SGLang 0.5.23's own router given the same capture list (adaptive_spec_params.py:342-358):
    the same steps for every batch; and a tier keyed at `Routing.key(level)` serves that level's batches."""
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    routing = tr.Routing(capture, 48)
    levels = {1: 3, 5: 2, 24: 1, 40: 0}
    keys = {routing.key(level) for level in levels}
    tiers = tr.from_levels({lv: s for lv, s in levels.items() if routing.key(lv) not in
                            [routing.key(o) for o in levels if o > lv]}, routing)
    params = AdaptiveSpeculativeParams(initial_steps=tiers.start_point().steps, cfg_path=str(tiers.write(tmp_path)))
    params.set_cuda_graph_bs(list(capture) if capture else None)
    for batch in range(1, 49):
        assert (params.get_steps_for_batch(batch),) == routing.steps_for(tiers, batch), batch
    assert all(k <= 48 for k in keys)  # never keyed above EAGLE's request cap
    for level, steps in levels.items():
        if routing.key(level) not in [routing.key(o) for o in levels if o > level]:
            assert routing.steps_for(tiers, level) == (steps,), level


def test_routing_from_a_plans_flags():
    r = tr.Routing.from_flags(["--speculative-algorithm", "EAGLE3", "--cuda-graph-bs-decode", "8", "1", "4"])
    assert r == tr.Routing((1, 4, 8), 48)  # unset --max-running-requests: SGLang's 48 under EAGLE
    assert tr.Routing.from_flags(["--max-running-requests", "64", "--cuda-graph-bs-decode=1 2"]) == tr.Routing((1, 2), 64)
    assert tr.Routing.from_flags(["--cuda-graph-max-bs-decode", "16"]) == tr.Routing(None, None)  # pads nothing
    assert tr.Routing.from_flags(["--cuda-graph-bs-decode", "1", "2", "--disable-decode-cuda-graph"]).capture is None
    assert tr.Routing((1, 2, 4, 8, 16, 32, 64), 48).key(40) == 33  # pads to 64, above the cap: routed the same
    with pytest.raises(UserError, match="levels routed to one tier hold different steps"):
        tr.from_levels({3: 2, 4: 1}, tr.Routing((1, 2, 4), 48))
