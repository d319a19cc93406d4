"""bench allreduce: a rank starts with exactly the environment one of the server's TP workers gets.

The reference is the server's own path (tests/test_sitecustomize.py): a process started with the kit's
sitecustomize on PYTHONPATH and KIT_PROFILE_ENV naming the rendered profile.env, which sets SGLang's own
variables as engine.py `_set_envs_and_config` does and then starts a `multiprocessing` spawn child. A
probe sitecustomize chained after the kit's records each interpreter's environment at start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_profiles import SITECUSTOMIZE_DIR, child_env, clean_env, profile_toml, write_profiles

from bench.allreduce.launch import sglang_parent_env, worker_environ
from launcher.profiles.plan import build_plan, check_environ
from launcher.profiles.render import write_plan
from launcher.profiles.rules.parent_env import PARENT_SET_ENV
from launcher.state_layout import StatePaths

REPO = Path(__file__).resolve().parents[3]

# Chained by the kit's sitecustomize (or imported first where the kit's is not on the path): writes this
# interpreter's environment, its command line and the text of the file KIT_PROFILE_ENV names.
PROBE = """
import json, os
def _probe():
    out = os.environ.get("ENV_PROBE_DIR")
    if not out:
        return
    with open("/proc/self/cmdline", "rb") as fh:
        argv = [a.decode() for a in fh.read().split(b"\\0") if a]
    try:
        with open(os.environ["KIT_PROFILE_ENV"]) as fh:
            env_file = fh.read()
    except (KeyError, OSError):
        env_file = None
    with open(os.path.join(out, f"{os.getpid()}.json"), "w") as fh:
        json.dump({"argv": argv, "env": dict(os.environ), "env_file": env_file}, fh)
_probe()
"""

# SGLang's launcher: engine.py _set_envs_and_config (:1898-1925), then spawn (:1995).
SGLANG_PARENT = """
import multiprocessing as mp, os, sys

def worker():
    pass

if __name__ == "__main__":
    symm_mem, nvls, dcp_size = sys.argv[1] == "1", sys.argv[2] == "1", int(sys.argv[3])
    if "NCCL_CUMEM_ENABLE" not in os.environ or symm_mem:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(symm_mem))
    if "NCCL_NVLS_ENABLE" not in os.environ or nvls or symm_mem:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(nvls or symm_mem))
    if "NCCL_GRAPH_MIXING_SUPPORT" not in os.environ or symm_mem:
        if dcp_size > 1:
            os.environ["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    if os.environ.get("TRTLLM_ENABLE_PDL", "1") != "0":
        os.environ["TRTLLM_ENABLE_PDL"] = "1"
    mp.set_start_method("spawn", force=True)
    p = mp.Process(target=worker)
    p.start()
    p.join()
    sys.exit(p.exitcode)
"""

USER_PROFILES = {
    # overrides every variable SGLang sets itself: the profile must win in every rank
    "pinned.toml": profile_toml(
        extends="nccl-tuned",
        env={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "TRTLLM_ENABLE_PDL": "0", "NCCL_NVLS_ENABLE": "0"},
    ),
    # a server flag changes what SGLang sets
    "symm.toml": profile_toml(server={"enable-symm-mem": True, "dcp-size": 2}, env={"NCCL_PROTO": "Simple"}),
}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def _probes(folder: Path, marker: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return [f for f in found if any(marker in a for a in f["argv"])]


def _base(tmp_path: Path, probe_out: Path, profiles: Path, inherited: dict[str, str]) -> dict[str, str]:
    probe_dir = tmp_path / "probe-site"
    probe_dir.mkdir(exist_ok=True)
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    return child_env(ENV_PROBE_DIR=str(probe_out), KIT_PROFILES_DIR=str(profiles), PYTHONUNBUFFERED="1",
                     PYTHONPATH=f"{REPO}:{probe_dir}", **inherited)


def _rank_environments(tmp_path: Path, base: dict[str, str], profile: str | None) -> list[dict]:
    out = tmp_path / "ar"
    args = ["--backends", "gloo", "--nranks", "2", "--sizes", "4K", "--iters", "1", "--warmup", "0", "--out", str(out)]
    if profile:
        args += ["--profile", profile]
    proc = subprocess.run([sys.executable, "-m", "bench.allreduce.cli", *args], env=base, cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    rows = json.loads((out / "allreduce.json").read_text())
    assert [r["status"] for r in rows] == ["ok"] and rows[0]["wrong"] == 0
    ranks = _probes(Path(base["ENV_PROBE_DIR"]), "bench.allreduce.worker")
    assert len(ranks) == 2
    return ranks


def _tp_worker_environment(tmp_path: Path, base: dict[str, str], profile: str | None, monkeypatch) -> dict:
    """What the server's TP worker sees: server program env (supervisor_conf.py), SGLang's parent, spawn."""
    env = dict(base)
    env["PYTHONPATH"] = f"{SITECUSTOMIZE_DIR}:{base['PYTHONPATH']}"
    if profile:
        monkeypatch.setenv("KIT_PROFILES_DIR", base["KIT_PROFILES_DIR"])
        plan = build_plan(profile, spec="off", environ=check_environ())
        write_plan(tmp_path / "state", plan)
        env["KIT_PROFILE_ENV"] = str(StatePaths(tmp_path / "state").profile_env)
        flags = plan.flags
    else:
        flags = []
    script = tmp_path / "sglang_parent.py"
    script.write_text(SGLANG_PARENT)
    symm = "--enable-symm-mem" in flags
    nvls = "--enable-nccl-nvls" in flags
    dcp = int(flags[flags.index("--dcp-size") + 1]) if "--dcp-size" in flags else 1
    proc = subprocess.run([sys.executable, str(script), str(int(symm)), str(int(nvls)), str(dcp)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (worker,) = _probes(Path(base["ENV_PROBE_DIR"]), "--multiprocessing-fork")
    return worker


def _comparable(seen: dict) -> dict[str, str]:
    # PYTHONPATH: the rank's also names the checkout (to import bench); KIT_PROFILE_ENV: each side
    # rendered its own copy of the plan, compared by content below; ENV_PROBE_DIR: where each probe writes.
    return {k: v for k, v in seen["env"].items() if k not in ("PYTHONPATH", "KIT_PROFILE_ENV", "ENV_PROBE_DIR")}


@pytest.mark.stack
@pytest.mark.parametrize(
    ("profile", "inherited"),
    [
        ("nccl-tuned", {}),
        ("nccl-tuned", {"NCCL_NVLS_ENABLE": "1", "TRTLLM_ENABLE_PDL": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "32"}),
        ("pinned", {}),
        ("symm", {"NCCL_CUMEM_ENABLE": "0"}),
        (None, {"NCCL_CUMEM_ENABLE": "1"}),
    ],
)
def test_a_rank_sees_exactly_what_a_tp_worker_sees(tmp_path, monkeypatch, profile, inherited):
    profiles = write_profiles(tmp_path / "profiles", USER_PROFILES)
    rank_probe, worker_probe = tmp_path / "rank-probe", tmp_path / "worker-probe"
    rank_probe.mkdir()
    worker_probe.mkdir()
    ranks = _rank_environments(tmp_path, _base(tmp_path, rank_probe, profiles, inherited), profile)
    worker = _tp_worker_environment(tmp_path, _base(tmp_path, worker_probe, profiles, inherited), profile, monkeypatch)
    for rank in ranks:
        assert _comparable(rank) == _comparable(worker)
        assert rank["env_file"] == worker["env_file"]  # the same rendered profile.env (None without a profile)
        assert rank["env"]["PYTHONPATH"].split(":")[0] == str(SITECUSTOMIZE_DIR)
    for name in sglang_parent_env({}, ["--dcp-size", "2"]):
        assert name in worker["env"] or profile != "symm"  # every variable SGLang sets was exercised


def test_the_profile_wins_over_sglang_and_sglang_over_the_shell(tmp_path, monkeypatch):
    profiles = write_profiles(tmp_path / "profiles", USER_PROFILES)
    monkeypatch.setenv("KIT_PROFILES_DIR", str(profiles))
    plan = build_plan("pinned", spec="off", environ=check_environ())
    write_plan(tmp_path / "state", plan)
    env = worker_environ({"CUDA_DEVICE_MAX_CONNECTIONS": "32", "NCCL_PROTO": "Simple", "KIT_PROFILE_ENV": "/x"},
                         StatePaths(tmp_path / "state").profile_env, plan.flags)
    assert env["KIT_PROFILE_ENV"] == str(StatePaths(tmp_path / "state").profile_env)
    # inherited as SGLang's launcher leaves it: its 8 over the profile's 1, which the rank's
    # sitecustomize puts back (the test above runs that part)
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert (env["TRTLLM_ENABLE_PDL"], env["NCCL_PROTO"], env["KIT_ACTIVE_PROFILE"]) == ("0", "LL", "pinned")
    bare = worker_environ({"CUDA_DEVICE_MAX_CONNECTIONS": "32", "KIT_PROFILE_ENV": "/x"})
    assert "KIT_PROFILE_ENV" not in bare  # no --profile: an inherited file is not applied
    assert (bare["CUDA_DEVICE_MAX_CONNECTIONS"], bare["NCCL_CUMEM_ENABLE"], bare["NCCL_NVLS_ENABLE"]) == ("8", "0", "0")


def test_sglang_parent_env_names_match_the_rules():
    assert set(PARENT_SET_ENV) <= set(sglang_parent_env({}, ["--dcp-size", "2"]))  # the rules' list, all mimicked
    assert "NCCL_GRAPH_MIXING_SUPPORT" not in sglang_parent_env({}, [])
    assert sglang_parent_env({}, ["--dcp-size=2"])["NCCL_GRAPH_MIXING_SUPPORT"] == "0"
    assert "NCCL_GRAPH_MIXING_SUPPORT" not in sglang_parent_env({"NCCL_GRAPH_MIXING_SUPPORT": "1"}, ["--dcp-size", "2"])
    assert sglang_parent_env({}, ["--enable-symm-mem"])["NCCL_CUMEM_ENABLE"] == "1"
    assert sglang_parent_env({"NCCL_NVLS_ENABLE": "0"}, ["--enable-nccl-nvls"])["NCCL_NVLS_ENABLE"] == "1"
    assert "TRTLLM_ENABLE_PDL" not in sglang_parent_env({"TRTLLM_ENABLE_PDL": "0"}, [])
