"""The installed wheel (pyproject.toml packaging): what the images install, run outside the checkout.

Builds the wheel, installs it with its dependencies into a fresh venv in a temporary folder, and runs
the console scripts from there, with no PYTHONPATH and the checkout out of reach: the built-in
profiles and sitecustomize must come from the wheel, and the stand-in must not be in it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from testsupport.net import free_port, wait_healthy

REPO = Path(__file__).resolve().parent.parent
BUILTIN = sorted(p.stem for p in (REPO / "profiles").glob("*.toml") if p.stem != "base")


# What is not the distribution's source: environments, caches, build and run outputs, git.
SKIPPED_IN_COPY = (".git", ".venv*", ".cache", ".state", ".kit", ".whl", ".gl", "build", "dist", "results",
                   "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(bin dir of the fresh venv, a clean environment, a scratch folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith(("KIT_", "NCCL_", "SGLANG_"))}
    # Built from a copy: pip builds a local folder in place, and the checkout is no scratch space.
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*SKIPPED_IN_COPY))
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp / "dist"),
                  str(src)], cwd=tmp, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp / "dist").glob("pcie_spec_kit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "launcher/builtin_profiles/fused.toml" in names and "launcher/site/sitecustomize.py" in names
    assert "launcher/builtin_profiles/model/kimi-k2.toml" in names  # model overlays ship too
    assert not [n for n in names if n.startswith(("testsupport/", "tests/")) or "standin" in n]
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp, env=env)
    assert made.returncode == 0, made.stderr
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp, env=env)
    assert pip.returncode == 0, pip.stderr[-2000:]
    work = tmp / "work"
    work.mkdir()
    return venv / "bin", env, work


@pytest.mark.stack
def test_the_wheel_runs_from_its_own_files(installed):
    bindir, env, work = installed
    where = _run([str(bindir / "python"), "-c", "import launcher, bench; print(launcher.__file__, bench.__file__)"],
                 cwd=work, env=env)
    assert where.returncode == 0 and str(REPO) not in where.stdout and "site-packages" in where.stdout
    missing = _run([str(bindir / "python"), "-c", "import testsupport"], cwd=work, env=env)
    assert missing.returncode != 0 and "No module named 'testsupport'" in missing.stderr


@pytest.mark.stack
def test_launcher_profiles_lists_the_builtin_profiles(installed):
    bindir, env, work = installed
    r = _run([str(bindir / "launcher"), "profiles", "--json"], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert sorted(row["name"] for row in rows) == BUILTIN and len(rows) == len(BUILTIN) >= 8
    assert all("site-packages/launcher/builtin_profiles/" in row["path"] for row in rows)


@pytest.mark.stack
def test_launcher_show_fused_eagle3(installed):
    bindir, env, work = installed
    r = _run([str(bindir / "launcher"), "show", "fused", "--spec", "eagle3", "--json"], cwd=work,
             env={**env, "MODEL_PATH": "/models/target", "DRAFT_MODEL_PATH": "/models/draft"})
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["name"] == "fused" and plan["spec"] == "eagle3"
    assert "--speculative-algorithm" in plan["argv"] and "/models/draft" in plan["argv"]


@pytest.mark.stack
def test_launcher_profiles_with_no_profile_found_exits_2_naming_the_folders(installed, tmp_path):
    bindir, env, work = installed
    r = _run([str(bindir / "launcher"), "profiles"], cwd=work, env={**env, "KIT_BUILTIN_PROFILES_DIR": str(tmp_path)})
    assert r.returncode == 2 and f"searched {tmp_path}" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.stack
def test_serve_dry_run_points_supervisord_at_the_shipped_sitecustomize(installed, tmp_path):
    bindir, env, work = installed
    r = _run([str(bindir / "launcher"), "serve", "--dry-run", "--state-dir", str(tmp_path)], cwd=work,
             env={**env, "MODEL_PATH": "/m", "DRAFT_MODEL_PATH": "/d", "KIT_PATCH_CHECK": "skip"})
    assert r.returncode == 0, r.stderr
    conf = (tmp_path / "supervisord.conf").read_text()
    assert "site-packages/launcher/site" in conf
    assert Path(conf.split("site-packages/launcher/site")[0].split('"')[-1] + "site-packages/launcher/site/sitecustomize.py").is_file()


@pytest.mark.stack
def test_bench_run_no_switch_against_the_standin(installed, tmp_path):
    """The bench needs neither profiles/ nor MODEL_PATH: the label comes from --profiles, the spec from the server."""
    bindir, env, work = installed
    port = free_port()
    standin_env = {**env, "PYTHONPATH": str(REPO), "STANDIN_STARTUP_DELAY_S": "0.1", "STANDIN_TTFT_MS": "5",
                   "STANDIN_VERIFY_MS": "3"}
    server = subprocess.Popen([sys.executable, "-m", "testsupport.standin", "--port", str(port),
                               "--speculative-algorithm", "EAGLE3"], cwd=REPO, env=standin_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        r = _run([str(bindir / "bench"), "run", "--no-switch", "--profiles", "baseline", "--url", f"http://127.0.0.1:{port}",
                  "--repeats", "1", "--num-prompts", "2", "--max-tokens", "8", "--warmup", "0", "--out", str(tmp_path)],
                 cwd=work, env={**env, "KIT_CONTROL_PORT": str(free_port()), "MPLCONFIGDIR": str(tmp_path / "mpl")},
                 timeout=180)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name != "mpl")
    cell = json.loads((run_dir / "baseline__eagle3.json").read_text())
    assert cell["valid"] is True and cell["completed"] == 2


def test_every_folder_that_ships_files_is_a_listed_package():
    """setuptools warns (and will stop including) data folders missing from `packages`: each folder under a
    listed package that holds shipped files is listed itself, or mapped through package-dir."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(cfg["packages"])
    mapped = {REPO / d for d in cfg.get("package-dir", {}).values()}
    missing = []
    for top in ("launcher", "bench"):
        for folder in sorted(p for p in (REPO / top).rglob("*") if p.is_dir()):
            if folder.name == "__pycache__" or folder in mapped:
                continue
            shipped = [f for f in folder.iterdir() if f.is_file() and f.suffix != ".pyc"]
            name = ".".join(folder.relative_to(REPO).parts)
            if shipped and name not in packages:
                missing.append(name)
    assert missing == [], f"add {missing} to [tool.setuptools] packages in pyproject.toml"
