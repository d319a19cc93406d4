"""launcher/profiles/env_file.py and its rule (rules/env_file.py): profile.env as sitecustomize reads it, and a plan
whose env the server would never get refused by `launcher check`, /check and /switch before anything runs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from helpers_profiles import (
    ENV,
    SITECUSTOMIZE_DIR,
    child_env,
    clean_env,
    profile_toml,
    run_launcher,
    write_profiles,
)

from launcher.errors import UserError
from launcher.profiles import env_file
from launcher.profiles.plan import build_plan, evaluate
from launcher.profiles.render import env_file_text, write_plan

CHUNK = 100_000  # one value: under an entry's limit, so only the file's total is at stake


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def _sitecustomize_max_bytes() -> int:
    """sitecustomize's _MAX_BYTES, read without running the file (importing it applies KIT_PROFILE_ENV)."""
    tree = ast.parse((SITECUSTOMIZE_DIR / "sitecustomize.py").read_text())
    [node] = [n for n in tree.body if isinstance(n, ast.Assign) and [t.id for t in n.targets] == ["_MAX_BYTES"]]
    return eval(compile(ast.Expression(node.value), "sitecustomize.py", "eval"), {})  # noqa: S307 - a literal


def test_the_cap_is_the_one_sitecustomize_applies():
    assert env_file.MAX_BYTES == _sitecustomize_max_bytes() == 1 << 20


def _profiles(tmp_path, monkeypatch, pad: int, entry: int = 0):
    """`big`: ten values of CHUNK over two files (each under the 1 MiB a profile file may hold), a PAD of `pad`
    bytes, an ENTRY of `entry` bytes when given."""
    extra = {"ENTRY": "e" * entry} if entry else {}
    root = write_profiles(tmp_path / "user", {
        "half.toml": profile_toml("half", extends="baseline", env={f"HALF_{i}": "h" * CHUNK for i in range(5)}),
        "big.toml": profile_toml("big", extends="half", env={**{f"BIG_{i}": "b" * CHUNK for i in range(5)},
                                                             "PAD": "p" * pad, **extra}),
    })
    monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
    return root


def _size_with(tmp_path, monkeypatch, pad: int) -> int:
    _profiles(tmp_path, monkeypatch, pad)
    plan, _ = evaluate("big", "off", environ=ENV)
    return env_file.size(plan.name, plan.spec, plan.env)


def _child_sees(tmp_path, state) -> dict:
    code = "import json, os; print(json.dumps({k: len(os.environ.get(k, '')) for k in ('PAD', 'BIG_4')}))"
    env = child_env(PYTHONPATH=str(SITECUSTOMIZE_DIR), KIT_PROFILE_ENV=str(state / "profile.env"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {"env": json.loads(proc.stdout), "stderr": proc.stderr}


@pytest.mark.stack
def test_bug_a_plan_at_the_cap_runs_and_one_byte_more_is_refused_as_sitecustomize_would_ignore_it(tmp_path, monkeypatch):
    """sitecustomize ignores a profile.env over 1 MiB whole (so the server started without the profile's env and
    the switch rolled back); the rule draws the line at the same byte."""
    pad = 1000 + env_file.MAX_BYTES - _size_with(tmp_path, monkeypatch, 1000)
    assert _size_with(tmp_path, monkeypatch, pad) == env_file.MAX_BYTES
    plan = build_plan("big", "off", environ=ENV)
    assert len(env_file_text(plan).encode()) == env_file.MAX_BYTES
    write_plan(tmp_path / "at", plan)
    assert _child_sees(tmp_path, tmp_path / "at")["env"] == {"PAD": pad, "BIG_4": CHUNK}

    root = _profiles(tmp_path, monkeypatch, pad + 1)
    with pytest.raises(UserError) as exc:
        build_plan("big", "off", environ=ENV)
    msg = str(exc.value)
    assert f"{root / 'big.toml'}: key 'env.BIG_0'" in msg or f"{root / 'half.toml'}: key 'env.HALF_0'" in msg
    assert f"{env_file.MAX_BYTES + 1} bytes as profile.env, over the {env_file.MAX_BYTES} bytes sitecustomize" in msg
    over = tmp_path / "over"  # what the server would have got: nothing at all
    over.mkdir()
    (over / "profile.env").write_text(env_file_text(plan).replace("PAD=", "PAD=p", 1))
    seen = _child_sees(tmp_path, over)
    assert seen["env"] == {"PAD": 0, "BIG_4": 0} and "larger than" in seen["stderr"]


def test_an_entry_too_long_to_exec_with_is_refused(tmp_path, monkeypatch):
    def one(length: int):
        root = write_profiles(tmp_path / "user", {"long.toml": profile_toml("l", extends="baseline",
                                                                             env={"ENTRY": "e" * length})})
        monkeypatch.setenv("KIT_PROFILES_DIR", str(root))
        return root

    one(env_file.MAX_ENTRY_BYTES - len("ENTRY="))
    build_plan("long", "off", environ=ENV)  # at the limit: runs
    root = one(env_file.MAX_ENTRY_BYTES - len("ENTRY=") + 1)
    with pytest.raises(UserError) as exc:
        build_plan("long", "off", environ=ENV)
    assert str(exc.value) == (f"{root / 'long.toml'}: key 'env.ENTRY': ENTRY is 131072 bytes as NAME=value, over the "
                              "131071 bytes Linux execs a process with (MAX_ARG_STRLEN): SGLang's launcher and its "
                              "workers could not start and the switch would roll back; shorten the value")


@pytest.mark.stack
def test_an_entry_at_the_limit_execs_and_one_byte_more_does_not():
    """The entry limit is Linux's: what the rule lets through, exec takes."""
    ok = "x" * (env_file.MAX_ENTRY_BYTES - len("A="))
    assert subprocess.run(["true"], env={"A": ok}).returncode == 0
    with pytest.raises(OSError):
        subprocess.run(["true"], env={"A": ok + "x"})


@pytest.mark.stack
def test_launcher_check_refuses_it_with_exit_2(tmp_path, monkeypatch):
    root = _profiles(tmp_path, monkeypatch, CHUNK)
    proc = run_launcher("check", "big", "--spec", "off", env=child_env(KIT_PROFILES_DIR=str(root)))
    assert proc.returncode == 2 and "over the 1048576 bytes sitecustomize applies" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
