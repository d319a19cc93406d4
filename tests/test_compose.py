"""docker-compose.yml, checked by docker-compose itself (`config` needs no Docker engine).

`make test` installs docker-compose 1.29.2 in .venv/compose; these tests fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
# Profile variables that stay out of the container on purpose: the compose file publishes container
# ports 30000 and 30100, so the server must keep listening on 0.0.0.0:30000 in there.
NOT_PASSED = {"KIT_SERVER_HOST", "KIT_SERVER_PORT"}


def compose_bin() -> str:
    """The docker-compose v1 that `make test` installs in a venv of its own (.venv/compose), else PATH's."""
    own = Path(sys.prefix) / "compose" / "bin" / "docker-compose"
    found = str(own) if own.exists() else shutil.which("docker-compose")
    assert found, "docker-compose is not installed: `make test` puts it in .venv/compose (or apt-get install docker-compose)"
    return found


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A copy of the compose file in a folder of its own, so no .env of the checkout leaks in."""
    shutil.copy(COMPOSE_FILE, tmp_path / "docker-compose.yml")
    return tmp_path


@pytest.fixture(scope="module")
def default_cfg(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One `docker-compose config` with only MODEL_PATH set, shared by the read-only tests."""
    project = tmp_path_factory.mktemp("compose")
    shutil.copy(COMPOSE_FILE, project / "docker-compose.yml")
    return project, loaded(project, MODEL_PATH="/srv/models/kimi")


def config(project: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(project)}
    base.update(env)
    return subprocess.run(
        [compose_bin(), "config"], cwd=project, env=base, capture_output=True, text=True, timeout=60
    )


def loaded(project: Path, **env: str) -> dict:
    proc = config(project, **env)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def profile_names() -> list[str]:
    return sorted(p.stem for p in (ROOT / "profiles").glob("*.toml") if p.stem != "base")


def seconds(value: str) -> int:
    total = 0
    for amount, unit in re.findall(r"(\d+)([hms])", value):
        total += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


@pytest.mark.stack
def test_default_config(default_cfg):
    project, cfg = default_cfg
    server = cfg["services"]["server"]
    assert server["build"]["target"] == "server"
    assert server["environment"]["PROFILE"] == "baseline"
    assert server["environment"]["SPEC"] == ""  # serve then takes settings.default_spec(), the registry's one default
    assert server["environment"]["MODEL_PATH"] == "/srv/models/kimi"
    devices = server["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert server["ipc"] == "host"
    assert server["shm_size"] == "32gb"
    assert server["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert server["restart"] == "unless-stopped"
    assert server["logging"]["driver"] == "json-file" and "max-size" in server["logging"]["options"]
    assert "/srv/models/kimi:/srv/models/kimi:ro" in server["volumes"]
    mounts = {v.split(":")[1]: v for v in server["volumes"]}
    assert mounts["/var/lib/kit"].startswith("kit-state:")
    assert mounts["/var/cache/flashinfer"].startswith("flashinfer-cache:")
    assert mounts["/var/cache/huggingface"].startswith("hf-cache:")
    assert mounts["/opt/kit/profiles"].endswith(":ro")
    assert mounts["/results"].startswith(str(project / "results"))


@pytest.mark.stack
def test_compose_default_spec_is_the_registrys(default_cfg, tmp_path):
    """Compose names no spec mode of its own: the server it configures, run with the SPEC compose gives
    it, starts the spec mode the settings registry names as default (the one `make` passes too)."""
    from launcher import settings

    spec = default_cfg[1]["services"]["server"]["environment"]["SPEC"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "SPEC": spec,
           "PROFILE": "baseline", "MODEL_PATH": "/models/m", "DRAFT_MODEL_PATH": "/models/d", "KIT_PATCH_CHECK": "skip"}
    proc = subprocess.run([sys.executable, "-m", "launcher", "serve", "--dry-run", "--state-dir", str(tmp_path / "s")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"profile baseline + {settings.default_spec({})} (digest" in proc.stderr
    assert json.loads((tmp_path / "s" / "profile.json").read_text())["spec"] == settings.default_spec({})


@pytest.mark.stack
def test_the_model_overlay_reaches_the_server_and_is_none_by_default(default_cfg, project):
    """The server reads MODEL_OVERLAY at start and for every switch; the built-in overlays are under the
    profiles mount, a user's under its KIT_PROFILES_DIR folder."""
    assert default_cfg[1]["services"]["server"]["environment"]["MODEL_OVERLAY"] == ""
    (project / ".env").write_text("MODEL_PATH=/srv/models/kimi\nMODEL_OVERLAY=kimi-k2\n")
    assert loaded(project)["services"]["server"]["environment"]["MODEL_OVERLAY"] == "kimi-k2"
    shell = loaded(project, MODEL_OVERLAY="deepseek-v3")["services"]["server"]["environment"]
    assert shell["MODEL_OVERLAY"] == "deepseek-v3"  # the environment wins over .env, as make's does


@pytest.mark.stack
def test_ports_are_loopback_only_by_default_and_configurable(default_cfg, project):
    server = default_cfg[1]["services"]["server"]
    assert sorted(server["ports"]) == ["127.0.0.1:30000:30000/tcp", "127.0.0.1:30100:30100/tcp"]
    moved = loaded(project, MODEL_PATH="/m", KIT_BIND_ADDR="10.0.0.5", SGLANG_HOST_PORT="8000")["services"][
        "server"
    ]
    assert sorted(moved["ports"]) == ["10.0.0.5:30100:30100/tcp", "10.0.0.5:8000:30000/tcp"]


@pytest.mark.stack
def test_healthcheck_allows_a_1t_model_load(default_cfg):
    hc = default_cfg[1]["services"]["server"]["healthcheck"]
    assert hc["test"][0] == "CMD" and "http://127.0.0.1:30000/health" in hc["test"]
    assert seconds(hc["start_period"]) >= 1800
    assert hc["retries"] >= 3


@pytest.mark.stack
def test_bench_service(project):
    cfg = loaded(project, MODEL_PATH="/m", KIT_CONTROL_TOKEN="s3cret")
    bench = cfg["services"]["bench"]
    assert bench["profiles"] == ["bench"]
    assert bench["build"]["target"] == "bench"
    assert bench["depends_on"] == {"server": {"condition": "service_healthy"}}
    assert bench["environment"]["KIT_CONTROL_URL"] == "http://server:30100"
    assert bench["environment"]["KIT_SERVER_URL"] == "http://server:30000"
    assert bench["environment"]["KIT_CONTROL_TOKEN"] == "s3cret"
    assert cfg["services"]["server"]["environment"]["KIT_CONTROL_TOKEN"] == "s3cret"
    server_results = [v for v in cfg["services"]["server"]["volumes"] if v.split(":")[1] == "/results"]
    assert server_results and server_results[0].split(":")[0] + ":/results:rw" in bench["volumes"]
    # `bench run --out results` (its default) resolves to the results volume.
    assert bench["working_dir"] == "/"
    # NVML for the energy columns, no compute: the bench shares no GPU work with the server
    devices = bench["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["utility"]}]


@pytest.mark.stack
@pytest.mark.parametrize("profile", profile_names() or ["baseline"])
def test_every_profile_configures(project, profile):
    env = loaded(project, MODEL_PATH="/m", PROFILE=profile, SPEC="ngram")["services"]["server"]["environment"]
    assert env["PROFILE"] == profile and env["SPEC"] == "ngram"


@pytest.mark.stack
def test_draft_model_is_mounted_at_the_same_path(project):
    with_draft = loaded(project, MODEL_PATH="/m", DRAFT_MODEL_PATH="/d/eagle3")["services"]["server"]
    assert "/d/eagle3:/d/eagle3:ro" in with_draft["volumes"]
    assert with_draft["environment"]["DRAFT_MODEL_PATH"] == "/d/eagle3"


@pytest.mark.stack
def test_without_draft_model_a_placeholder_is_mounted(default_cfg):
    project, cfg = default_cfg
    without = cfg["services"]["server"]
    assert without["environment"]["DRAFT_MODEL_PATH"] == ""
    placeholder = next(v for v in without["volumes"] if v.endswith(":/opt/kit/no-draft:ro"))
    assert placeholder.startswith(str(project / "docker" / "no-draft"))
    assert (ROOT / "docker" / "no-draft").is_dir(), "the placeholder folder must exist in the checkout"


@pytest.mark.stack
def test_missing_model_path_fails_naming_it(project):
    proc = config(project)
    assert proc.returncode != 0
    assert "MODEL_PATH is not set" in proc.stderr
    empty = config(project, MODEL_PATH="")
    assert empty.returncode != 0 and "MODEL_PATH is not set" in empty.stderr


@pytest.mark.stack
def test_env_file_is_read(project):
    (project / ".env").write_text("MODEL_PATH=/from/dotenv\nPROFILE=fused\n")
    env = loaded(project)["services"]["server"]["environment"]
    assert env["MODEL_PATH"] == "/from/dotenv" and env["PROFILE"] == "fused"


def test_env_example_documents_every_variable():
    names = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    documented = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M))
    assert names - documented == set()


@pytest.mark.stack
def test_env_example_with_model_path_is_a_valid_env_file(project):
    text = (ROOT / ".env.example").read_text().replace("\nMODEL_PATH=\n", "\nMODEL_PATH=/srv/models/kimi\n")
    (project / ".env").write_text(text)
    server = loaded(project)["services"]["server"]
    assert server["environment"]["PROFILE"] == "baseline"
    assert sorted(server["ports"]) == ["127.0.0.1:30000:30000/tcp", "127.0.0.1:30100:30100/tcp"]


def test_profile_variables_reach_the_container():
    """A ${VAR} a profile reads must be passed by the compose file or set by the image."""
    used: set[str] = set()
    for path in (ROOT / "profiles").rglob("*.toml"):
        used |= set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", path.read_text()))
    assert used, "profiles/ should reference MODEL_PATH at least"
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    passed = set(compose["services"]["server"]["environment"])
    image_env = set(re.findall(r"(?:^ENV |^\s+)([A-Z_][A-Z0-9_]*)=", (ROOT / "Dockerfile").read_text(), re.M))
    assert used - passed - image_env - NOT_PASSED == set()


@pytest.mark.stack
def test_image_paths_live_on_volumes(default_cfg):
    """State and FlashInfer caches the image points at must be on the compose file's volumes."""
    targets = [v.split(":")[1] for v in default_cfg[1]["services"]["server"]["volumes"]]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for var in (
        "KIT_STATE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "FLASHINFER_AUTOTUNE_DIR",
        "FLASHINFER_AUTOTUNE_CACHE_DIR",
    ):
        m = re.search(rf"\b{var}=(\S+)", dockerfile)
        assert m, var
        assert any(m.group(1) == t or m.group(1).startswith(t.rstrip("/") + "/") for t in targets), (
            var,
            m.group(1),
        )


@pytest.mark.stack
def test_kit_profiles_dir_folders_reach_server_and_bench_read_only(project, tmp_path):
    """Compose cannot split KIT_PROFILES_DIR, so `make` lays the launcher's override over the file: each
    folder mounted read-only at its own path in both containers, and the variable passed on."""
    from launcher.profiles import catalog

    folders = [tmp_path / "mine", tmp_path / "team$x"]
    for f in folders:
        f.mkdir()
    dirs = ":".join(map(str, folders))
    override = project / ".kit" / "compose.profiles.yml"
    override.parent.mkdir()
    override.write_text(json.dumps(catalog.compose_override({"KIT_PROFILES_DIR": dirs})))
    base = {"PATH": os.environ["PATH"], "HOME": str(project), "MODEL_PATH": "/m", "KIT_PROFILES_DIR": dirs}
    proc = subprocess.run([compose_bin(), "-f", "docker-compose.yml", "-f", str(override), "--profile", "bench",
                           "config"], cwd=project, env=base, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout.replace("$$", "$"))  # `config` writes a literal '$' as '$$' again
    for name in ("server", "bench"):
        svc = cfg["services"][name]
        assert svc["environment"]["KIT_PROFILES_DIR"] == dirs
        binds = [v for v in svc["volumes"] if isinstance(v, dict) and v.get("type") == "bind"]
        assert [(v["source"], v["target"], v.get("read_only")) for v in binds] == [(str(f), str(f), True) for f in folders]
    # The built-in profiles stay mounted beside them.
    assert any(str(v).endswith(":/opt/kit/profiles:ro") for v in cfg["services"]["server"]["volumes"])
