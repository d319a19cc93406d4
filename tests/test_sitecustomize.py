"""sitecustomize/: a plain `python` child started with it on PYTHONPATH gets the active profile's env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_profiles import ENV, SITECUSTOMIZE_DIR, child_env, clean_env

from launcher.profiles.plan import build_plan
from launcher.profiles.render import write_plan

pytestmark = pytest.mark.stack  # every test here starts a process

KEYS = ["NCCL_PROTO", "NCCL_ALGO", "KIT_ACTIVE_PROFILE", "KIT_ACTIVE_SPEC", "CHAIN_MARKER", "A"]
PROBE = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {KEYS!r}}}))"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def run_child(tmp_path: Path, *, pythonpath: list[Path] | None = None, code: str | None = None, **env: str):
    """Start `python -c CODE` from an empty folder, so only PYTHONPATH decides which sitecustomize runs."""
    paths = [SITECUSTOMIZE_DIR] if pythonpath is None else pythonpath
    full_env = child_env(PYTHONPATH=":".join(map(str, paths)), **env)
    for key in KEYS:
        if key not in env:
            full_env.pop(key, None)
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", code or PROBE],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc


def seen(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def state(tmp_path) -> Path:
    """A state dir holding nccl-tuned's rendered plan."""
    write_plan(tmp_path / "state", build_plan("nccl-tuned", "eagle3", environ=ENV))
    return tmp_path / "state"


def write_json(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_child_sees_profile_env(tmp_path, state):
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(state / "profile.env"))
    got = seen(proc)
    assert got["NCCL_PROTO"] == "LL" and got["NCCL_ALGO"] == "Ring"
    assert got["KIT_ACTIVE_PROFILE"] == "nccl-tuned"
    assert got["KIT_ACTIVE_SPEC"] == "eagle3"
    assert proc.stderr == ""


def test_without_the_dir_on_pythonpath_nothing_is_applied(tmp_path, state):
    got = seen(run_child(tmp_path, pythonpath=[], KIT_PROFILE_ENV=str(state / "profile.env")))
    assert got["NCCL_PROTO"] is None and got["KIT_ACTIVE_PROFILE"] is None


def test_profile_env_overrides_the_inherited_value(tmp_path, state):
    got = seen(run_child(tmp_path, KIT_PROFILE_ENV=str(state / "profile.env"), NCCL_PROTO="LL128"))
    assert got["NCCL_PROTO"] == "LL"


def test_grandchildren_inherit_the_profile_env(tmp_path, state):
    code = (
        "import subprocess, sys; sys.stdout.write(subprocess.run([sys.executable, '-S', '-c', "
        "'import os; print(os.environ.get(\"NCCL_PROTO\"))'], capture_output=True, text=True).stdout)"
    )
    proc = run_child(tmp_path, code=code, KIT_PROFILE_ENV=str(state / "profile.env"))
    assert proc.stdout.strip() == "LL"  # -S: the grandchild runs no sitecustomize of its own


def test_a_plan_json_applies_its_env_name_and_spec(tmp_path, state):
    other = write_json(tmp_path / "other.json", {"name": "other", "env": {"NCCL_PROTO": "Simple", "A": "x"}})
    got = seen(run_child(tmp_path, KIT_PROFILE_ENV=str(other)))
    assert got["NCCL_PROTO"] == "Simple" and got["A"] == "x"
    assert got["KIT_ACTIVE_PROFILE"] == "other"
    assert got["KIT_ACTIVE_SPEC"] is None  # no spec in that file
    got = seen(run_child(tmp_path, KIT_PROFILE_ENV=str(state / "profile.json")))
    assert (got["KIT_ACTIVE_PROFILE"], got["KIT_ACTIVE_SPEC"], got["NCCL_PROTO"]) == ("nccl-tuned", "eagle3", "LL")


def test_bug_the_state_dir_alone_applies_nothing(tmp_path, state):
    """supervisord and the control API have KIT_STATE_DIR but no KIT_PROFILE_ENV: a profile's env
    (once, KIT_CONTROL_TOKEN) must never reach them."""
    proc = run_child(tmp_path, KIT_STATE_DIR=str(state))
    got = seen(proc)
    assert got["KIT_ACTIVE_PROFILE"] is None and got["NCCL_PROTO"] is None and proc.stderr == ""


def test_bug_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "profile.env"
    os.mkfifo(fifo)
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(fifo))  # run_child's timeout fails the test on a hang
    assert seen(proc)["KIT_ACTIVE_PROFILE"] is None
    assert "not a regular file" in proc.stderr


def test_an_oversized_file_is_refused(tmp_path):
    big = tmp_path / "profile.env"
    big.write_text("A=" + "x" * (1 << 20) + "\0")
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(big))
    assert seen(proc)["A"] is None and "larger than" in proc.stderr


@pytest.mark.parametrize("entries", ["A=1\0B C=2\0", "=1\0", "A=1\nNCCL_ALGO=Tree\0", "A\0"])
def test_bug_a_malformed_entry_applies_nothing(tmp_path, entries):
    bad = tmp_path / "profile.env"
    bad.write_text(entries)
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(bad))
    got = seen(proc)
    assert got["A"] is None and got["NCCL_ALGO"] is None and "NAME=value" in proc.stderr


@pytest.mark.parametrize("name", ["nope.json", "profile.env"])
def test_missing_file_applies_nothing_silently(tmp_path, name):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(empty / name))
    got = seen(proc)
    assert got["KIT_ACTIVE_PROFILE"] is None and got["NCCL_PROTO"] is None
    assert proc.stderr == ""


def test_no_state_dir_applies_nothing(tmp_path):
    proc = run_child(tmp_path)
    assert seen(proc)["KIT_ACTIVE_PROFILE"] is None
    assert proc.stderr == ""


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "x", "env": {"A": "1"',  # truncated JSON
        {"name": "x", "env": {"A": "1", "NCCL_PROTO": 4}},  # a non-string value
        {"name": "x", "env": ["A=1"]},  # env not a table
        {"env": {"A": "1"}},  # no name
        ["A=1"],  # not an object
        "",  # empty file
    ],
)
def test_malformed_file_one_stderr_line_nothing_applied(tmp_path, content):
    bad = write_json(tmp_path / "profile.json", content)
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(bad))
    got = seen(proc)
    assert got["A"] is None and got["NCCL_PROTO"] is None and got["KIT_ACTIVE_PROFILE"] is None
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kit sitecustomize: ignoring") and str(bad) in lines[0]


def test_unreadable_path_is_reported_not_raised(tmp_path):
    proc = run_child(tmp_path, KIT_PROFILE_ENV=str(tmp_path))  # a directory, not a file
    assert seen(proc)["KIT_ACTIVE_PROFILE"] is None
    assert len(proc.stderr.splitlines()) == 1


def chained_dir(tmp_path: Path, body: str) -> Path:
    other = tmp_path / "other-site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(body)
    return other


def test_chained_sitecustomize_also_runs(tmp_path, state):
    other = chained_dir(tmp_path, "import os\nos.environ['CHAIN_MARKER'] = 'ran'\n")
    got = seen(run_child(tmp_path, pythonpath=[SITECUSTOMIZE_DIR, other], KIT_PROFILE_ENV=str(state / "profile.env")))
    assert got["CHAIN_MARKER"] == "ran"
    assert got["KIT_ACTIVE_PROFILE"] == "nccl-tuned"
    # Python itself imports only the first sitecustomize on the path: the marker above came from chaining.
    got = seen(run_child(tmp_path, pythonpath=[other], KIT_PROFILE_ENV=str(state / "profile.env")))
    assert got["CHAIN_MARKER"] == "ran" and got["KIT_ACTIVE_PROFILE"] is None


def test_chained_sitecustomize_sees_the_profile_env(tmp_path, state):
    other = chained_dir(
        tmp_path, "import os\nos.environ['CHAIN_MARKER'] = os.environ.get('NCCL_PROTO', 'unset')\n"
    )
    got = seen(run_child(tmp_path, pythonpath=[SITECUSTOMIZE_DIR, other], KIT_PROFILE_ENV=str(state / "profile.env")))
    assert got["CHAIN_MARKER"] == "LL"


def test_crash_in_chained_sitecustomize_does_not_stop_the_interpreter(tmp_path, state):
    other = chained_dir(tmp_path, "raise RuntimeError('boom from the other sitecustomize')\n")
    proc = run_child(tmp_path, pythonpath=[SITECUSTOMIZE_DIR, other], KIT_PROFILE_ENV=str(state / "profile.env"))
    got = seen(proc)
    assert got["KIT_ACTIVE_PROFILE"] == "nccl-tuned" and got["NCCL_PROTO"] == "LL"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "chained" in lines[0] and "boom from the other sitecustomize" in lines[0]


def test_bug_sitecustomize_adds_no_imports_to_python_startup(tmp_path, state):
    """Start-up budget (5 ms per process, tools/bench_startup.py): applying the profile must not import
    modules a bare interpreter does not load; `json` alone pulls in re/enum/collections, about 10 ms."""
    code = "import sys; print(' '.join(sorted(sys.modules)))"
    bare = set(run_child(tmp_path, pythonpath=[], code=code).stdout.split())
    proc = run_child(tmp_path, code=code, KIT_PROFILE_ENV=str(state / "profile.env"))
    with_kit = set(proc.stdout.split())
    assert seen(run_child(tmp_path, KIT_PROFILE_ENV=str(state / "profile.env")))["KIT_ACTIVE_PROFILE"] == "nccl-tuned"
    assert sorted(with_kit - bare - {"sitecustomize"}) == []


# SGLang's parent writes these after start-up and then spawns its TP workers
# (engine.py:_set_envs_and_config, mp.set_start_method("spawn")); this does the same with multiprocessing.
SPAWNING_PARENT = """
import json, multiprocessing as mp, os, sys

def worker(q):
    q.put({k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_CUMEM_ENABLE")})

if __name__ == "__main__":
    parent = {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_CUMEM_ENABLE")}
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    os.environ["NCCL_CUMEM_ENABLE"] = "1"
    mp.set_start_method("spawn", force=True)
    q = mp.Queue()
    p = mp.Process(target=worker, args=(q,))
    p.start()
    print(json.dumps({"parent_at_start": parent, "worker": q.get(timeout=60)}))
    p.join()
"""


@pytest.mark.parametrize(
    ("profile_env", "worker"),
    [
        # the profile sets them: its values win in every spawned worker
        ({"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_CUMEM_ENABLE": "0"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_CUMEM_ENABLE": "0"}),
        # the profile leaves them alone: what SGLang's parent set reaches the workers untouched
        ({"NCCL_PROTO": "LL"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "8", "NCCL_CUMEM_ENABLE": "1"}),
    ],
)
def test_contract_for_variables_sglang_sets_in_its_parent(tmp_path, profile_env, worker):
    """docs/deployment.md, "Variables SGLang sets itself": the profile wins in the workers, else SGLang does."""
    plan = write_json(tmp_path / "plan.json", {"name": "p", "env": profile_env})
    script = tmp_path / "parent.py"
    script.write_text(SPAWNING_PARENT)
    proc = run_child(tmp_path, code=f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                     KIT_PROFILE_ENV=str(plan))
    got = seen(proc)
    assert got["worker"] == worker
    expected_parent = {k: profile_env.get(k) for k in worker}
    assert got["parent_at_start"] == expected_parent  # sitecustomize ran before SGLang's own code
