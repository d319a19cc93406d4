"""One EAGLE-3 point type, one validity: every place a user gives a point (`launcher switch --spec-params`,
`launcher fleet switch --spec-params`, `bench tune --eagle3`, `bench run --eagle3`, a profile's
`[spec_params]` table) accepts and refuses the same points, with the same reason, from
launcher/profiles/spec_params.py. Nothing here reaches a server: each command stops at the first check
after the point (the missing control token, the missing fleet file), which tells an accepted point."""

from __future__ import annotations

import pytest
from helpers_profiles import ENV, clean_env

from bench.run.cli import main as bench_run_main
from bench.tune.cli import main as bench_tune_main
from launcher.cli import main as launcher_main
from launcher.errors import UserError
from launcher.profiles import spec_params
from launcher.profiles.plan import build_plan

ACCEPTED = ["1,1,2", "3,1,4", "20,1,21", "1023,1,1024", "5,4,8", "2,17,3", "1,4,5"]
REFUSED = [  # (point, what its reason says)
    ("3,1,5", "replaces draft tokens by steps + 1 = 4"),
    ("20,4,2000", "whole numbers from 1 to 1024"),
    ("2,4,40", "draft tree holds 20 candidates"),
    ("1,4,6", "draft tree holds 4 candidates"),
    ("0,1,1", "whole numbers from 1 to 1024"),
    ("1025,1,1026", "whole numbers from 1 to 1024"),
]
URLS = ["--url", "http://127.0.0.1:9", "--control", "http://127.0.0.1:9"]


@pytest.fixture
def env(monkeypatch, tmp_path):
    clean_env(monkeypatch)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KIT_CONTROL_TOKEN", raising=False)
    monkeypatch.setenv("KIT_PROFILES_DIR", str(tmp_path))
    return tmp_path


def _refusal(rc: int, err: str, accepted_words: str) -> str | None:
    """None when the command got past the point (it stopped at `accepted_words`), else its error line."""
    assert rc == 2, err
    if accepted_words in err:
        return None
    assert "Traceback" not in err
    return err.strip()


def _switch(text, capsys):
    rc = launcher_main(["switch", "baseline", "--spec", "eagle3", "--spec-params", text, "--url", URLS[1]])
    return _refusal(rc, capsys.readouterr().err, "KIT_CONTROL_TOKEN is not set")


def _fleet_switch(text, tmp_path, capsys):
    rc = launcher_main(["fleet", "switch", "--fleet", str(tmp_path / "none.toml"), "baseline", "--spec", "eagle3",
                        "--spec-params", text])
    return _refusal(rc, capsys.readouterr().err, "none.toml")


def _tune(text, capsys):
    rc = bench_tune_main([*URLS, "--profiles", "baseline", "--spec", "eagle3", "--eagle3", text])
    return _refusal(rc, capsys.readouterr().err, "bench tune switches the server: set KIT_CONTROL_TOKEN")


def _run(text, capsys):
    rc = bench_run_main([*URLS, "--profiles", "baseline", "--spec", "off", "--eagle3", text])
    return _refusal(rc, capsys.readouterr().err, "switching needs the control token")


def _table(text, root):
    steps, topk, draft = text.split(",")
    (root / "pinned.toml").write_text('extends = "baseline"\ndescription = "p"\n[spec_params]\n'
                                      f"steps = {steps}\ntopk = {topk}\ndraft_tokens = {draft}\n")
    try:
        plan = build_plan("pinned", "eagle3", environ=ENV)
    except UserError as exc:
        return str(exc)
    assert plan.spec_params.text() == text  # accepted: the plan runs the point the table pins
    return None


def _reason(text: str) -> str:
    """What spec_params.py says of a refused point: its range, or SGLang's rules it breaks."""
    values = [int(v) for v in text.split(",")]
    if not all(1 <= v <= spec_params.MAX_VALUE for v in values):
        return spec_params.RANGE
    return "; ".join(spec_params.point_problems(spec_params.SpecParams(steps=values[0], topk=values[1],
                                                                       draft_tokens=values[2])))


@pytest.mark.parametrize("text", ACCEPTED)
def test_a_point_sglang_runs_is_accepted_everywhere(env, capsys, text):
    assert spec_params.parse(text).text() == text
    assert _switch(text, capsys) is None
    assert _fleet_switch(text, env, capsys) is None
    assert _tune(text, capsys) is None
    assert _run(text, capsys) is None
    assert _table(text, env) is None


@pytest.mark.parametrize("text, words", REFUSED)
def test_a_point_sglang_would_not_run_is_refused_everywhere_with_the_same_reason(env, capsys, text, words):
    reason = _reason(text)
    assert words in reason
    with pytest.raises(UserError) as exc:
        spec_params.parse(text)
    assert str(exc.value) == f"{spec_params.FLAG} '{text}': {reason}"
    for flag, said in (("--spec-params", _switch(text, capsys)), ("--spec-params", _fleet_switch(text, env, capsys)),
                       ("--eagle3", _tune(text, capsys)), ("--eagle3", _run(text, capsys))):
        assert said is not None and said.endswith(f"{flag} '{text}': {reason}"), (flag, said)
    said = _table(text, env)  # the file and the key, then the same reason
    assert said is not None and str(env / "pinned.toml") in said and "key 'spec_params." in said and reason in said
