"""Makefile: the checks that stop before docker runs, the docker commands each verb runs, and waiting.

Each test runs `make` in a scratch copy of the Makefile with its own profiles/ and no .env, and with
stand-in `docker` and `docker-compose` first on PATH. The stand-ins record every call (with the
MODEL_PATH/PROFILE/SPEC they were given) so a test can assert that docker was, or was never, called.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TEST_PROFILES = ("baseline", "fused", "custom-ar")
TEST_SPECS = ("eagle3", "ngram", "off")
VERBS = (
    "help",
    "build",
    "up",
    "switch",
    "status",
    "down",
    "logs",
    "bench",
    "sla",
    "gate",
    "tune",
    "allreduce",
    "doctor",
    "demo",
    "demo-tune",
    "demo-sla",
    "test",
    "test-fast",
    "test-real",
    "test-outside",
    "demo-real",
    "lint",
    "check",
    "show",
    "profiles",
    "venv",
    "aic",
    "docs",
    "e2e",
    "fleet-up",
    "fleet-status",
    "fleet-switch",
    "monitor",
)

FAKE_DOCKER = r"""#!/bin/sh
printf '%s %s | MODEL_PATH=%s PROFILE=%s SPEC=%s%s\n' "$(basename "$0")" "$*" "${MODEL_PATH-<unset>}" \
    "${PROFILE-<unset>}" "${SPEC-<unset>}" "${MODEL_OVERLAY+ MODEL_OVERLAY=$MODEL_OVERLAY}" >> "$CALLS"
me=$(basename "$0")
if [ "$me" = docker ] && [ "$1" = compose ]; then
    [ -n "$FAKE_NO_PLUGIN" ] && exit 1
    shift
    me=docker-compose
fi
if [ "$me" = docker-compose ]; then
    case "$1" in
    version) echo "Docker Compose version v2 (stand-in)" ;;
    ps) echo 0123456789ab ;;
    esac
    exit 0
fi
case "$1" in
info) [ -z "$FAKE_NO_ENGINE" ]; exit $? ;;
image|manifest) [ "$2" = inspect ] && [ -z "$FAKE_NO_BASE" ]; exit $? ;;
inspect) echo "${FAKE_STATE:-running/healthy}" ;;
logs) echo "Load weight end. type=DeepseekV3ForCausalLM" ;;
esac
exit 0
"""


@dataclass
class Kit:
    root: Path
    calls: Path
    model: Path
    draft: Path
    env: dict[str, str]

    def make(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        full = dict(self.env)
        full.update(env)
        return subprocess.run(
            ["make", "--no-print-directory", *args],
            cwd=self.root,
            env=full,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    def with_models(self, **env: str) -> dict[str, str]:
        return {"MODEL_PATH": str(self.model), "DRAFT_MODEL_PATH": str(self.draft), **env}

    def docker_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def compose_calls(self) -> list[str]:
        """Calls other than the `compose version` and `docker info` probes."""
        return [c for c in self.docker_calls() if " version |" not in c and not c.startswith("docker info |")]


@pytest.fixture()
def kit(tmp_path: Path) -> Kit:
    root = tmp_path / "kit"
    root.mkdir()
    for name in ("Makefile", "docker-compose.yml", "Dockerfile"):
        shutil.copy(ROOT / name, root / name)
    # The real launcher package: the Makefile asks it which profiles and spec modes exist, with the
    # system's python3 (no kit venv, no pydantic on this PATH).
    shutil.copytree(ROOT / "launcher", root / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "launcher" / "__init__.py").write_text('__version__ = "9.8.7"\n')
    (root / "docker").mkdir()
    shutil.copy(ROOT / "docker" / "patch-set-hash.sh", root / "docker" / "patch-set-hash.sh")
    (root / "patches").mkdir()
    (root / "patches" / "series.toml").write_text('sglang_version = "0.5.23"\n')
    (root / "profiles").mkdir()
    for name in ("base", *TEST_PROFILES, *(f"spec/{m}" for m in TEST_SPECS)):
        (root / "profiles" / f"{name}.toml").parent.mkdir(exist_ok=True)
        (root / "profiles" / f"{name}.toml").write_text('description = "scratch profile"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "docker-compose"):
        (bin_dir / tool).write_text(FAKE_DOCKER)
        (bin_dir / tool).chmod(0o755)
    model, draft = tmp_path / "models" / "target", tmp_path / "models" / "draft"
    model.mkdir(parents=True)
    draft.mkdir()
    calls = tmp_path / "calls.log"
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CALLS": str(calls),
        "LC_ALL": "C",
    }
    return Kit(root, calls, model, draft, env)


# ---- help ---------------------------------------------------------------------------------------------


@pytest.mark.stack
def test_help_is_the_default_goal(kit):
    proc = kit.make()
    assert proc.returncode == 0, proc.stderr
    for verb in VERBS:
        assert re.search(rf"^  {verb} +\S", proc.stdout, re.M), verb
    assert re.search(r"^Profiles: +baseline custom-ar fused$", proc.stdout, re.M)
    assert re.search(r"^Spec modes: +eagle3 ngram off$", proc.stdout, re.M)
    assert kit.docker_calls() == []


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["fleet-up", "fleet-status", "fleet-switch"])
def test_fleet_verbs_need_a_fleet_file(kit, verb):
    proc = kit.make(verb, "PY=/opt/py/bin/python")
    assert proc.returncode == 2 and f"make {verb} needs FLEET=<fleet file>" in proc.stderr
    dry = kit.make("-n", verb, "PY=/opt/py/bin/python", "FLEET=f.toml", "PROFILE=fused", "SPEC=off")
    assert "/opt/py/bin/python -m launcher fleet" in dry.stdout and "--fleet f.toml" in dry.stdout


def test_every_verb_is_documented_in_the_makefile():
    text = (ROOT / "Makefile").read_text()
    documented = set(re.findall(r"^([a-z0-9-]+):.*## ", text, re.M))
    assert documented == set(VERBS)
    assert re.search(r"^\.DEFAULT_GOAL := help$", text, re.M)


# ---- make -n shows the docker command of every verb -------------------------------------------------------

DRY_RUN = {
    "build": r"^DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1 docker compose --profile bench build "
    r"--build-arg KIT_VERSION=9\.8\.7 --build-arg KIT_PATCHES_SHA256=\$\(docker/patch-set-hash\.sh patches\) .* server bench$",
    "up": r"^PROFILE=fused SPEC=eagle3 docker compose up -d server$",
    "switch": r"^docker compose exec -T server launcher switch fused --spec eagle3$",
    "status": r"^docker compose exec -T server launcher status$",
    "down": r"^docker compose --profile bench down$",
    "logs": r"^docker compose logs -f --tail=200 server$",
    "bench": r"^KIT_UID=\$\(id -u\) KIT_GID=\$\(id -g\) docker compose --profile bench run --rm bench run$",
    "tune": r"^KIT_UID=\$\(id -u\) KIT_GID=\$\(id -g\) docker compose --profile bench run --rm bench tune "
    r"--facts /results/tune/host-facts.json $",
    "sla": r"^KIT_UID=\$\(id -u\) KIT_GID=\$\(id -g\) docker compose --profile bench run --rm bench sla $",
    "gate": r"^KIT_UID=\$\(id -u\) KIT_GID=\$\(id -g\) docker compose --profile bench run --rm bench gate $",
    "allreduce": r"^docker compose run --rm --no-deps --entrypoint bench server allreduce --profile fused "
    r"--out /results/allreduce/\$\(date -u \+%Y%m%dT%H%M%SZ\)-fused --graph --with-nccl-tests$",
    "doctor": r"^docker compose run --rm --no-deps --entrypoint launcher server doctor $",  # models given
}


@pytest.mark.stack
@pytest.mark.parametrize("verb", sorted(DRY_RUN))
def test_dry_run_shows_the_docker_command(kit, verb):
    proc = kit.make("-n", verb, "PROFILE=fused", **kit.with_models())
    assert proc.returncode == 0, proc.stderr
    joined = proc.stdout.replace("\\\n\t", "").replace("\\\n", "")
    assert re.search(DRY_RUN[verb], joined, re.M), proc.stdout
    assert kit.compose_calls() == [], "make -n must not run docker"


@pytest.mark.stack
def test_dry_run_up_builds_then_starts(kit):
    out = kit.make("-n", "up", "PROFILE=fused", **kit.with_models()).stdout
    build = out.index(" build --build-arg KIT_VERSION=9.8.7 --build-arg KIT_PATCHES_SHA256=")
    assert build < out.index("docker compose up -d server") < out.index("docker inspect")


@pytest.mark.stack
def test_falls_back_to_docker_compose_v1(kit):
    proc = kit.make("-n", "down", FAKE_NO_PLUGIN="1")
    assert re.search(r"^MODEL_PATH=/nonexistent docker-compose --profile bench down$", proc.stdout, re.M), (
        proc.stdout
    )
    explicit = kit.make("-n", "logs", "COMPOSE=podman-compose")
    assert "MODEL_PATH=/nonexistent podman-compose logs -f --tail=200 server" in explicit.stdout


@pytest.mark.stack
def test_host_side_verbs_use_py(kit):
    for verb, expected in (
        ("test", "/opt/py/bin/python -m pytest -q -n 4 --dist loadfile"),
        ("test-fast", '/opt/py/bin/python -m pytest -q -m "not stack"'),
        ("check", "/opt/py/bin/python -m launcher check --all"),
        ("show", "/opt/py/bin/python -m launcher show custom-ar --spec ngram"),
        ("demo", "/opt/py/bin/python -m testsupport.demo"),
        ("lint", "/opt/py/bin/python -m ruff check ."),
        ("docs", "/opt/py/bin/python -m launcher settings --write"),
    ):
        proc = kit.make("-n", verb, "PY=/opt/py/bin/python", "PROFILE=custom-ar", "SPEC=ngram")
        assert proc.returncode == 0, proc.stderr
        assert expected in proc.stdout, (verb, proc.stdout)
    lint = kit.make("-n", "lint", "PY=/opt/py/bin/python").stdout
    assert "Dockerfile" in lint and "config -q" in lint
    assert "/opt/py/bin/lint-imports --no-logo" in lint  # the import contracts, with PY's import-linter


def lint_kit(kit: Kit) -> dict[str, str]:
    """`make lint`'s tools as stand-ins: ruff through PY, hadolint, and .venv/compose's docker-compose."""
    compose = kit.root / ".venv" / "compose" / "bin" / "docker-compose"
    compose.parent.mkdir(parents=True)
    compose.write_text(FAKE_DOCKER)
    compose.chmod(0o755)
    return {"PY": str(fake_python(kit)), "HADOLINT": "true", "LINT_IMPORTS": "true"}


@pytest.mark.stack
def test_lint_checks_the_compose_file_with_the_venvs_docker_compose(kit):
    """Neither `docker compose` nor a docker-compose on PATH: the one `make test` put in .venv/compose checks it."""
    tools = lint_kit(kit)
    (kit.root.parent / "bin" / "docker-compose").unlink()
    proc = kit.make("lint", *(f"{k}={v}" for k, v in tools.items()), FAKE_NO_PLUGIN="1", SHELLCHECK="true")
    assert proc.returncode == 0, proc.stderr
    assert "docker-compose.yml ok" in proc.stdout and "NOT checked" not in proc.stderr
    assert [c.split(" |")[0] for c in kit.compose_calls()] == ["docker-compose -f docker-compose.yml config -q"]


@pytest.mark.stack
def test_lint_says_on_one_line_that_shellcheck_is_missing(kit):
    proc = kit.make("lint", *(f"{k}={v}" for k, v in lint_kit(kit).items()), "SHELLCHECK=no-such-shellcheck")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "make lint: shellcheck not installed, docker/*.sh NOT checked: apt-get install shellcheck (Debian)"]


@pytest.mark.stack
def test_lint_runs_shellcheck_on_the_scripts_when_installed(kit, tmp_path):
    log = tmp_path / "shellcheck.log"
    fake = tmp_path / "bin" / "shellcheck"
    fake.write_text(f'#!/bin/sh\necho "$*" > {log}\n')
    fake.chmod(0o755)
    proc = kit.make("lint", *(f"{k}={v}" for k, v in lint_kit(kit).items()))
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().split() == ["docker/patch-set-hash.sh"] and "shellcheck" not in proc.stderr


@pytest.mark.stack
def test_profiles_without_a_python_environment_lists_the_files(kit, tmp_path):
    no_python = tmp_path / "no-python"
    no_python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: launcher' >&2\nexit 1\n")
    no_python.chmod(0o755)
    proc = kit.make("profiles", f"PY={no_python}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-3:] == ["baseline", "custom-ar", "fused"]


# ---- checks that stop before docker ------------------------------------------------------------------------


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["up", "switch", "show", "allreduce"])
def test_unknown_profile_stops_before_docker(kit, verb):
    proc = kit.make(verb, "PROFILE=nonsense", **kit.with_models())
    assert proc.returncode != 0
    assert "unknown PROFILE 'nonsense'" in proc.stderr
    for name in TEST_PROFILES:
        assert name in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_base_is_not_a_profile(kit):
    proc = kit.make("up", "PROFILE=base", **kit.with_models())
    assert proc.returncode != 0 and "unknown PROFILE 'base'" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_profiles_from_kit_profiles_dir(kit, tmp_path):
    extra_a, extra_b = tmp_path / "extra-a", tmp_path / "extra-b"
    extra_a.mkdir()
    extra_b.mkdir()
    (extra_b / "mine.toml").write_text('extends = "fused"\n')
    (extra_b / "spec").mkdir()
    (extra_b / "spec" / "quick.toml").write_text('description = "my spec mode"\n')
    dirs = f"{extra_a}:{extra_b}"
    bad = kit.make("up", "PROFILE=nonsense", **kit.with_models(KIT_PROFILES_DIR=dirs))
    assert bad.returncode != 0 and "mine" in bad.stderr and str(extra_b) in bad.stderr
    assert kit.compose_calls() == []
    # The folders reach the containers: every compose verb lays the launcher's override over the file.
    ok = kit.make("up", "PROFILE=mine", "SPEC=quick", **kit.with_models(KIT_PROFILES_DIR=dirs))
    assert ok.returncode == 0, ok.stderr
    files = "-f docker-compose.yml -f .kit/compose.profiles.yml"
    assert f"docker compose {files} up -d server | MODEL_PATH={kit.model} PROFILE=mine SPEC=quick" in kit.compose_calls()
    override = yaml.safe_load((kit.root / ".kit" / "compose.profiles.yml").read_text())
    for service in ("server", "bench"):
        assert override["services"][service]["environment"] == {"KIT_PROFILES_DIR": dirs}
        assert [(v["source"], v["target"], v["read_only"]) for v in override["services"][service]["volumes"]] == [
            (str(extra_a), str(extra_a), True), (str(extra_b), str(extra_b), True)]
    for verb in ("switch", "status", "down", "bench"):
        assert re.search(rf"(^| )docker compose {files} ", kit.make("-n", verb, "PROFILE=mine", "SPEC=quick",
                         **kit.with_models(KIT_PROFILES_DIR=dirs)).stdout, re.M), verb
    # A COMPOSE that names its own file (make e2e) gets only the override added.
    own = kit.make("-n", "down", "COMPOSE=docker-compose -f /x/merged.yml", KIT_PROFILES_DIR=dirs).stdout
    assert "docker-compose -f /x/merged.yml -f .kit/compose.profiles.yml --profile bench down" in own, own


@pytest.mark.stack
def test_a_kit_profiles_dir_folder_that_does_not_exist_stops_before_docker(kit, tmp_path):
    proc = kit.make("up", "PROFILE=fused", **kit.with_models(KIT_PROFILES_DIR=str(tmp_path / "nope")))
    assert proc.returncode == 2 and f"KIT_PROFILES_DIR: {tmp_path / 'nope'} is not a folder" in proc.stderr
    assert kit.compose_calls() == []


def _model_overlays(kit: Kit, *names: str) -> None:
    for name in names:
        (kit.root / "profiles" / "model").mkdir(exist_ok=True)
        (kit.root / "profiles" / "model" / f"{name}.toml").write_text('description = "scratch overlay"\n')


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["up", "show", "allreduce"])
def test_unknown_model_overlay_stops_before_docker(kit, verb):
    _model_overlays(kit, "kimi-k2", "deepseek-v3")
    proc = kit.make(verb, "PROFILE=fused", "MODEL_OVERLAY=kimi", **kit.with_models())
    assert proc.returncode != 0
    assert "unknown MODEL_OVERLAY 'kimi'. Known model overlays: deepseek-v3 kimi-k2" in proc.stderr, proc.stderr
    assert "leave it empty for none" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_the_model_overlay_reaches_the_server_and_show(kit):
    _model_overlays(kit, "kimi-k2")
    assert re.search(r"^Model overlays: +kimi-k2$", kit.make("help").stdout, re.M)
    proc = kit.make("up", "PROFILE=fused", "MODEL_OVERLAY=kimi-k2", **kit.with_models())
    assert proc.returncode == 0, proc.stderr
    assert "server healthy after" in proc.stdout and "MODEL_OVERLAY=kimi-k2" in proc.stdout
    start = next(c for c in kit.compose_calls() if c.startswith("docker compose up -d server |"))
    assert start.endswith("PROFILE=fused SPEC=eagle3 MODEL_OVERLAY=kimi-k2"), start
    dry = kit.make("-n", "up", "PROFILE=fused", "MODEL_OVERLAY=kimi-k2", **kit.with_models()).stdout
    assert "MODEL_OVERLAY=kimi-k2 PROFILE=fused SPEC=eagle3 docker compose up -d server" in dry
    show = kit.make("-n", "show", "PY=/opt/py/bin/python", "PROFILE=fused", "SPEC=off", "MODEL_OVERLAY=kimi-k2").stdout
    assert "/opt/py/bin/python -m launcher show fused --spec off --model-overlay 'kimi-k2'" in show, show
    # A switch keeps the server's overlay: it is a per-deployment choice, not a switch argument.
    switch = kit.make("-n", "switch", "PROFILE=fused", "SPEC=off", "MODEL_OVERLAY=kimi-k2").stdout
    assert "launcher switch fused --spec off" in switch and "kimi" not in switch.split("launcher switch")[1]


@pytest.mark.stack
def test_the_model_overlay_from_dotenv_and_an_empty_one_on_the_command_line(kit):
    _model_overlays(kit, "kimi-k2")
    (kit.root / ".env").write_text(f"MODEL_PATH={kit.model}\nDRAFT_MODEL_PATH={kit.draft}\nMODEL_OVERLAY=kimi-k2\n")
    assert "MODEL_OVERLAY=kimi-k2 PROFILE=baseline SPEC=eagle3 docker compose up -d server" in kit.make("-n", "up").stdout
    # an empty value still wins over .env (as for compose): none
    empty = kit.make("-n", "up", "MODEL_OVERLAY=").stdout
    assert "MODEL_OVERLAY= PROFILE=baseline SPEC=eagle3 docker compose up -d server" in empty, empty
    assert "--model-overlay ''" in kit.make("-n", "show", "PY=/p", "MODEL_OVERLAY=").stdout
    # without one anywhere, nothing is added: the commands are as before
    (kit.root / ".env").write_text(f"MODEL_PATH={kit.model}\nDRAFT_MODEL_PATH={kit.draft}\n")
    assert "\nPROFILE=baseline SPEC=eagle3 docker compose up -d server" in kit.make("-n", "up").stdout
    assert "--model-overlay" not in kit.make("-n", "show", "PY=/p").stdout


@pytest.mark.stack
def test_model_overlays_from_kit_profiles_dir(kit, tmp_path):
    extra = tmp_path / "extra"
    (extra / "model").mkdir(parents=True)
    (extra / "model" / "mine.toml").write_text('description = "my model"\n')
    bad = kit.make("up", "MODEL_OVERLAY=nope", **kit.with_models(KIT_PROFILES_DIR=str(extra)))
    assert bad.returncode != 0 and "Known model overlays: mine" in bad.stderr and "<dir>/model/<name>.toml" in bad.stderr
    ok = kit.make("-n", "up", "MODEL_OVERLAY=mine", **kit.with_models(KIT_PROFILES_DIR=str(extra)))
    assert ok.returncode == 0 and "MODEL_OVERLAY=mine PROFILE=baseline" in ok.stdout, ok.stderr


@pytest.mark.stack
def test_the_default_spec_comes_from_the_launcher(kit):
    """No spec mode is spelled in the Makefile: the default is settings.default_spec()'s answer."""
    assert not re.search(r"^SPEC \?=.*eagle3", (ROOT / "Makefile").read_text(), re.M)
    settings_py = kit.root / "launcher" / "settings.py"
    text, n = re.subn(r'(\bSPEC = \w+\(\w+, )"eagle3"', r'\1"ngram"', settings_py.read_text())
    assert n == 1, "the SPEC setting's default is no longer written as expected; update this test"
    settings_py.write_text(text)
    (kit.root / "profiles" / "spec" / "ngram.toml").write_text('description = "n"\n')
    proc = kit.make("-n", "up", "PROFILE=fused", **kit.with_models())
    assert "PROFILE=fused SPEC=ngram docker compose up -d server" in proc.stdout, proc.stderr
    assert "SPEC=off" in kit.make("help", SPEC="off").stdout  # the environment still wins


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["up", "switch", "show"])
def test_unknown_spec_stops_before_docker(kit, verb):
    proc = kit.make(verb, "SPEC=medusa", **kit.with_models())
    assert proc.returncode != 0
    assert "unknown SPEC 'medusa'" in proc.stderr and "eagle3 ngram off" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["up", "bench", "tune", "allreduce"])
def test_missing_model_path_stops_before_docker(kit, verb):
    proc = kit.make(verb)
    assert proc.returncode != 0
    assert "MODEL_PATH is not set" in proc.stderr and ".env" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_both_missing_model_paths_are_reported_together(kit, tmp_path):
    proc = kit.make("up", "SPEC=eagle3")
    assert proc.returncode != 0
    assert "MODEL_PATH is not set" in proc.stderr and "needs DRAFT_MODEL_PATH" in proc.stderr
    proc = kit.make("up", MODEL_PATH=str(tmp_path / "m"), DRAFT_MODEL_PATH=str(tmp_path / "d"))
    assert f"MODEL_PATH={tmp_path / 'm'} does not exist" in proc.stderr
    assert f"DRAFT_MODEL_PATH={tmp_path / 'd'} does not exist" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_show_reads_dotenv_like_up(kit):
    (kit.root / ".env").write_text(f"MODEL_PATH={kit.model}\n")
    proc = kit.make("-n", "show", "PY=/opt/py/bin/python", "PROFILE=fused", "SPEC=off")
    assert "/opt/py/bin/python -m launcher show fused --spec off --env-file .env" in proc.stdout, proc.stdout


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["up", "build", "status", "down", "bench"])
def test_without_an_engine_one_clear_line_and_no_compose(kit, verb):
    proc = kit.make(verb, "SPEC=off", FAKE_NO_ENGINE="1", **kit.with_models())
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[0] == (
        f"make {verb}: no Docker engine answers (docker info failed): start it (sudo systemctl start docker) "
        "or set DOCKER_HOST"
    ), proc.stderr
    assert kit.compose_calls() == []


FAKE_PY = r"""#!/bin/sh
# A Python that says how it was asked to run the doctor; FAKE_PY_BROKEN: it cannot import the kit.
[ -n "$FAKE_PY_BROKEN" ] && exit 1
[ "$1" = -c ] && exit 0
echo "doctor ran on the host: $*"
exit "${FAKE_DOCTOR_RC:-0}"
"""


def fake_python(kit: Kit) -> Path:
    py = kit.root.parent / "bin" / "fake-python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    return py


@pytest.mark.stack
@pytest.mark.parametrize("engine", [{"FAKE_NO_ENGINE": "1"}, {"DOCKER": "no-such-docker"}], ids=["daemon-down", "no-docker"])
def test_doctor_without_an_engine_checks_the_host_from_the_venv(kit, engine):
    """No Docker engine (not started, or not installed): `make doctor` says so on one line and runs the
    doctor on the host with PY, passing DOCTOR_ARGS, instead of stopping; it runs no compose command."""
    py = fake_python(kit)
    proc = kit.make("doctor", f"PY={py}", "DOCTOR_ARGS=--out facts.json", **engine)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{py} -m launcher doctor --out facts.json",  # make echoes the command
                                        "doctor ran on the host: -m launcher doctor --out facts.json"]
    [note] = proc.stderr.splitlines()
    assert note.startswith("make doctor: no Docker engine answers (") and f"checking this host with {py} -m launcher " \
        "doctor --out facts.json instead" in note and "start Docker" in note, note
    assert kit.compose_calls() == []


@pytest.mark.stack
def test_doctor_on_the_host_keeps_the_doctors_exit_status(kit):
    proc = kit.make("doctor", f"PY={fake_python(kit)}", FAKE_NO_ENGINE="1", FAKE_DOCTOR_RC="1")
    assert proc.returncode != 0 and "doctor ran on the host" in proc.stdout


@pytest.mark.stack
def test_doctor_without_an_engine_or_a_kit_python_names_the_command(kit):
    proc = kit.make("doctor", f"PY={fake_python(kit)}", FAKE_NO_ENGINE="1", FAKE_PY_BROKEN="1")
    assert proc.returncode != 0
    last = proc.stderr.splitlines()[1]
    assert last.startswith("make doctor: no Docker engine, and ") and "cannot import the kit" in last
    assert ".venv/bin/pip install -e ." in last and "run .venv/bin/python -m launcher doctor" in last
    assert "doctor ran on the host" not in proc.stdout and kit.compose_calls() == []


@pytest.mark.stack
def test_doctor_without_an_engine_creates_the_venv_first(kit):
    """Without PY on the command line the host check uses .venv, built first as `make demo` builds it."""
    (kit.root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    lines = kit.make("-n", "doctor", FAKE_NO_ENGINE="1").stdout.splitlines()
    assert lines.index("make --no-print-directory .venv/.kit-installed") < lines.index(".venv/bin/python -m launcher doctor")
    assert not any("compose" in line for line in lines)


@pytest.mark.stack
def test_doctor_needs_no_model(kit):
    """The doctor checks the host; a new user runs it before any model is downloaded."""
    proc = kit.make("-n", "doctor")
    assert proc.returncode == 0, proc.stderr
    assert "MODEL_PATH=/nonexistent docker compose run --rm --no-deps --entrypoint launcher server doctor" in (
        proc.stdout.replace("\\\n\t", "")
    )


@pytest.mark.stack
def test_model_path_must_exist(kit, tmp_path):
    proc = kit.make("up", MODEL_PATH=str(tmp_path / "no-such-model"), DRAFT_MODEL_PATH=str(kit.draft))
    assert proc.returncode != 0
    assert f"MODEL_PATH={tmp_path / 'no-such-model'} does not exist" in proc.stderr
    assert kit.docker_calls() == []


@pytest.mark.stack
def test_model_paths_and_profile_from_dotenv(kit):
    (kit.root / ".env").write_text(
        f'# comment\nMODEL_PATH="{kit.model}"\nDRAFT_MODEL_PATH={kit.draft}\nPROFILE=custom-ar\nSPEC=ngram\n'
    )
    proc = kit.make("-n", "up")
    assert proc.returncode == 0, proc.stderr
    assert "PROFILE=custom-ar SPEC=ngram docker compose up -d server" in proc.stdout
    overridden = kit.make("-n", "up", "PROFILE=fused")
    assert "PROFILE=fused SPEC=ngram docker compose up -d server" in overridden.stdout


@pytest.mark.stack
def test_eagle3_needs_a_draft_model(kit):
    proc = kit.make("up", MODEL_PATH=str(kit.model))
    assert proc.returncode != 0
    assert "DRAFT_MODEL_PATH" in proc.stderr and "SPEC=ngram" in proc.stderr
    assert kit.docker_calls() == []
    ok = kit.make("-n", "up", "SPEC=off", MODEL_PATH=str(kit.model))
    assert ok.returncode == 0, ok.stderr
    assert "PROFILE=baseline SPEC=off docker compose up -d server" in ok.stdout


# ---- verbs run against the stand-in docker -------------------------------------------------------------------


@pytest.mark.stack
def test_switch_goes_through_the_control_api_not_a_recreate(kit):
    proc = kit.make("switch", "PROFILE=fused", "SPEC=ngram")
    assert proc.returncode == 0, proc.stderr
    calls = kit.compose_calls()
    assert len(calls) == 1
    assert calls[0].startswith("docker compose exec -T server launcher switch fused --spec ngram |")
    for forbidden in (" up ", " run ", " create ", " build ", "--force-recreate"):
        assert forbidden not in calls[0]


@pytest.mark.stack
def test_down_works_without_model_path(kit):
    proc = kit.make("down")
    assert proc.returncode == 0, proc.stderr
    assert kit.compose_calls() == [
        "docker compose --profile bench down | MODEL_PATH=/nonexistent PROFILE=<unset> SPEC=<unset>"
    ]


@pytest.mark.stack
def test_up_builds_starts_and_waits_until_healthy(kit):
    proc = kit.make("up", "PROFILE=fused", **kit.with_models())
    assert proc.returncode == 0, proc.stderr
    assert "server healthy after" in proc.stdout and "PROFILE=fused SPEC=eagle3" in proc.stdout
    calls = kit.compose_calls()
    build = next(i for i, c in enumerate(calls) if " build " in c)
    start = next(i for i, c in enumerate(calls) if c.startswith("docker compose up -d server |"))
    inspect = next(i for i, c in enumerate(calls) if c.startswith("docker inspect "))
    assert build < start < inspect
    assert calls[start].endswith(f"MODEL_PATH={kit.model} PROFILE=fused SPEC=eagle3")
    patch_hash = subprocess.run(
        [str(kit.root / "docker" / "patch-set-hash.sh"), str(kit.root / "patches")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"--build-arg KIT_PATCHES_SHA256={patch_hash} " in calls[build]
    assert (kit.root / "results").is_dir()


@pytest.mark.stack
def test_up_reports_a_container_that_died(kit):
    proc = kit.make("up", **kit.with_models(FAKE_STATE="exited/"))
    assert proc.returncode != 0
    assert "server is exited/" in proc.stderr and "make logs" in proc.stderr


@pytest.mark.stack
def test_up_gives_up_after_up_timeout(kit):
    proc = kit.make("up", "UP_TIMEOUT=0", **kit.with_models(FAKE_STATE="running/starting"))
    assert proc.returncode != 0
    assert "not healthy after" in proc.stderr and "UP_TIMEOUT" in proc.stderr


@pytest.mark.stack
@pytest.mark.parametrize("verb", ["build", "up", "allreduce", "doctor"])
def test_a_missing_base_image_stops_before_the_build_naming_sglang_image(kit, verb):
    """The Dockerfile's default tag is unverified: where neither docker nor its registry has it, one
    line names the base and the build argument to set, and no build runs."""
    proc = kit.make(verb, "SPEC=off", FAKE_NO_BASE="1", **kit.with_models())
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("make:")]
    assert errors == [
        f"make {verb}: base image 'lmsysorg/sglang:v0.5.23-cu130' is neither local nor in its registry "
        "(docker image inspect, docker manifest inspect): set SGLANG_IMAGE=<an SGLang 0.5.23 CUDA-13 image> "
        "in .env or on the make command line"
    ]
    calls = kit.compose_calls()
    assert "docker image inspect lmsysorg/sglang:v0.5.23-cu130 | " in "\n".join(calls) + " "
    assert any(c.startswith("docker manifest inspect lmsysorg/sglang:v0.5.23-cu130 |") for c in calls)
    assert not any(" build " in c for c in calls)


@pytest.mark.stack
def test_the_base_check_asks_for_the_named_image_and_passes_when_docker_has_it(kit):
    mine = "registry.example/sglang:0.5.23-cu130@sha256:" + "1" * 64
    (kit.root / ".env").write_text(f"SGLANG_IMAGE={mine}\n")
    proc = kit.make("build")
    assert proc.returncode == 0, proc.stderr
    calls = kit.compose_calls()
    check = next(i for i, c in enumerate(calls) if c.startswith(f"docker image inspect {mine} |"))
    build = next(i for i, c in enumerate(calls) if " build " in c)
    assert check < build and f"--build-arg SGLANG_IMAGE={mine}" in calls[build]
    assert not any(c.startswith("docker manifest inspect") for c in calls)  # found locally: no registry call
    dry = kit.make("-n", "up", "SPEC=off", **kit.with_models()).stdout
    assert f"docker image inspect '{mine}'" in dry


@pytest.mark.stack
def test_build_passes_pins_only_when_set(kit):
    plain = kit.make("-n", "build").stdout
    assert "--build-arg SGLANG_IMAGE" not in plain
    pinned_image = "lmsysorg/sglang:v0.5.23-cu130@sha256:" + "0" * 64
    (kit.root / ".env").write_text(f"SGLANG_IMAGE={pinned_image}\nDEEPEP_SM120=\n")
    pinned = kit.make("-n", "build", "MSCCLPP_REF=v0.9.0").stdout
    assert f"--build-arg SGLANG_IMAGE={pinned_image}" in pinned
    assert "--build-arg MSCCLPP_REF=v0.9.0" in pinned
    assert "DEEPEP_SM120" not in pinned


# ---- profile names in the documentation exist ------------------------------------------------------------------


def named_profiles() -> dict[str, set[str]]:
    """Profile names the Makefile, README.md and docs/*.md tell users to type (PROFILE=name)."""
    sources = [
        ROOT / "Makefile",
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / ".env.example",
    ]
    found: dict[str, set[str]] = {}
    for path in sources:
        if not path.exists():
            continue
        text = path.read_text()
        written = set(re.findall(r">\s*\S*/([a-z0-9][a-z0-9-]*)\.toml\b", text))  # one the text has the user write
        names = set(re.findall(r"\bPROFILE=([a-z0-9][a-z0-9-]*)", text)) - written
        names |= set(re.findall(r"^PROFILE \?= \$\(or \$\(call dotenv,PROFILE\),([a-z0-9-]+)\)$", text, re.M))
        for name in names:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_profile_named_in_the_docs_exists():
    found = named_profiles()
    assert "baseline" in found, "the Makefile's default profile should be found"
    missing = {
        name: sorted(where)
        for name, where in found.items()
        if not (ROOT / "profiles" / f"{name}.toml").is_file()
    }
    assert missing == {}, f"named but no profiles/<name>.toml: {missing}"
    assert "base" not in found, "base.toml is not a profile"


@pytest.mark.stack
def test_host_side_verbs_create_the_venv_first(kit):
    """Without PY on the command line, `make test` builds .venv (torch CPU + sglang parser) before pytest."""
    (kit.root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    out = kit.make("-n", "test").stdout
    assert "-m venv .venv" in out and "--no-deps sglang==0.5.23" in out and "torch==2.13.0" in out
    assert out.index("-m venv") < out.index(".venv/bin/python -m pytest -q")
    demo = kit.make("-n", "demo").stdout
    assert "-m venv .venv" in demo and "sglang" not in demo  # the demo needs no torch or sglang
