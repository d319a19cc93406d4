"""launcher/settings.py and launcher/settings_docs.py: the one registry of environment settings."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import settings, settings_docs
from launcher.settings import REGISTRY, SettingError

REPO = Path(__file__).resolve().parents[2]
# Dockerfile build arguments that are not environment settings: labels `make build` fills in, and
# KIT_GPU_STAGES, which only `make e2e` passes (tools/e2e/compose.e2e.yml).
BUILD_LABELS = {"KIT_PATCHES_SHA256", "KIT_REVISION", "KIT_CREATED", "KIT_VERSION", "KIT_GPU_STAGES"}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in REGISTRY and not k.startswith(("KIT_", "NCCL_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


# ----- typed values --------------------------------------------------------------------------------
def test_unset_and_empty_mean_the_default():
    assert settings.KIT_STOP_WAIT_S.get({}) == 120
    assert settings.KIT_STOP_WAIT_S.get({"KIT_STOP_WAIT_S": ""}) == 120
    assert settings.KIT_STATE_DIR.get({}) == Path("/var/lib/kit")
    assert settings.SPEC.get({}) == "eagle3"
    assert settings.KIT_CONTROL_URL.get({}) is None


@pytest.mark.parametrize(
    ("setting", "raw", "value"),
    [
        (settings.KIT_STOP_WAIT_S, " 7 ", 7),
        (settings.KIT_DRAIN_TIMEOUT_S, "2.5", 2.5),
        (settings.KIT_CONTROL_PORT, "31000", 31000),
        (settings.KIT_PATCH_CHECK, "skip", "skip"),
        (settings.KIT_PROFILES_DIR, "/a::/b", [Path("/a"), Path("/b")]),
        (settings.KIT_CONTROL_URL, "http://h:1/", "http://h:1"),
        (settings.KIT_NCCL_P2P_LEVEL, "PHB", "PHB"),
    ],
)
def test_good_values_parse(setting, raw, value):
    assert setting.get({setting.name: raw}) == value


@pytest.mark.parametrize(
    ("setting", "raw", "expected"),
    [
        (settings.KIT_STOP_WAIT_S, "abc", "a whole number >= 5"),
        (settings.KIT_STOP_WAIT_S, "4", "a whole number >= 5"),
        (settings.KIT_DRAIN_TIMEOUT_S, "nan", "a finite number of seconds > 0"),
        (settings.KIT_DRAIN_TIMEOUT_S, "inf", "a finite number of seconds > 0"),
        (settings.KIT_DRAIN_TIMEOUT_S, "-1", "a finite number of seconds > 0"),
        (settings.KIT_CONTROL_PORT, "70000", "a TCP port 1-65535"),
        (settings.KIT_PATCH_CHECK, "off", "one of enforce, skip"),
        (settings.KIT_CONTROL_URL, "localhost:30100", "an http(s) URL"),
        (settings.KIT_TP_SIZE, "x", "a whole number >= 1"),
    ],
)
def test_bad_values_name_the_variable_the_value_and_what_is_expected(setting, raw, expected):
    with pytest.raises(SettingError) as err:
        setting.get({setting.name: raw})
    msg = str(err.value)
    assert f"{setting.name}={raw!r}" in msg and expected in msg
    assert err.value.exit_code == 2


def test_a_secret_value_is_never_printed():
    assert settings.KIT_CONTROL_TOKEN.secret
    bad = settings.Setting(settings.PORT, None, "doc", "client", secret=True)
    bad.__set_name__(object, "KIT_X_SECRET")  # named as a Section names it, without registering it
    with pytest.raises(SettingError) as err:
        bad.get({"KIT_X_SECRET": "hunter2"})
    assert "hunter2" not in str(err.value) and "<hidden>" in str(err.value)


def test_check_lists_every_bad_value_of_the_scopes_it_is_asked_about():
    env = {"KIT_STOP_WAIT_S": "x", "KIT_HEALTH_TIMEOUT_S": "nan", "KIT_SERVER_URL": "nope"}
    with pytest.raises(SettingError) as err:
        settings.check(["server"], env)
    assert "KIT_STOP_WAIT_S" in str(err.value) and "KIT_HEALTH_TIMEOUT_S" in str(err.value)
    assert "KIT_SERVER_URL" not in str(err.value)  # a client setting: not the server's business
    settings.check(["server"], {"KIT_SERVER_URL": "nope"})


def test_control_url_falls_back_to_host_and_port_on_loopback():
    assert settings.control_url({}) == "http://127.0.0.1:30100"
    assert settings.control_url({"KIT_CONTROL_HOST": "0.0.0.0", "KIT_CONTROL_PORT": "1234"}) == "http://127.0.0.1:1234"
    assert settings.control_url({"KIT_CONTROL_URL": "http://ctl:9/", "KIT_CONTROL_PORT": "1"}) == "http://ctl:9"


def test_every_setting_is_documented_typed_and_scoped():
    for s in REGISTRY.values():
        assert s.doc.strip() and "\n" not in s.doc, s.name
        assert s.group in settings.GROUP_ORDER, s.name
        assert set(s.scope) <= set(settings.SCOPES), s.name
        if s.default is not None and not isinstance(s.default, list):
            assert s.get({s.name: s.shown_default}) == s.default, s.name  # the shown default parses back


# ----- one source of truth -------------------------------------------------------------------------
def _product_files() -> list[Path]:
    files = [*REPO.glob("launcher/**/*.py"), *REPO.glob("bench/**/*.py"), REPO / "sitecustomize" / "sitecustomize.py"]
    return [*files, REPO / "docker-compose.yml", REPO / "Dockerfile", REPO / "Makefile", *REPO.glob("profiles/**/*.toml")]


def test_every_kit_variable_the_product_mentions_is_registered():
    seen: set[str] = set()
    for path in _product_files():
        seen |= set(re.findall(r"\b(KIT_[A-Z0-9_]*[A-Z0-9])\b", path.read_text(encoding="utf-8")))
    unregistered = sorted(seen - set(REGISTRY) - BUILD_LABELS)
    assert unregistered == []


def _setting_name(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The registered name an expression spells: "NAME", a module constant holding it, or `<Setting>.name`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
    elif isinstance(node, ast.Name):
        name = constants.get(node.id)
    elif isinstance(node, ast.Attribute) and node.attr == "name":
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
        name = owner if owner in REGISTRY else getattr(getattr(settings, owner, None), "name", None)
    else:
        return None
    return name if name in REGISTRY else None


def _environ_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) for every registered setting read straight from the process environment:
    `os.environ[N]`, `os.environ.get(N)`, `os.getenv(N)`, `N in os.environ` (also as bare `environ`/`getenv`)."""
    tree = ast.parse(source)
    constants = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def is_environ(e: ast.expr) -> bool:
        return (isinstance(e, ast.Attribute) and e.attr in ("environ", "environb") and getattr(e.value, "id", "") == "os") or (
            isinstance(e, ast.Name) and e.id in ("environ", "environb"))

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "get" and is_environ(f.value)) or (
                isinstance(f, ast.Attribute) and f.attr == "getenv" and getattr(f.value, "id", "") == "os"
            ) or (isinstance(f, ast.Name) and f.id == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if is_environ(node.comparators[0]):
                key = node.left
        name = _setting_name(key, constants) if key is not None else None
        if name:
            found.append((node.lineno, name))
    return found


def test_no_product_module_reads_the_environment_around_the_registry():
    """Every registered name (KIT_*, MODEL_PATH, SPEC, ...) is read through its Setting, never straight
    from os.environ/getenv; only the registry module itself reads the environment."""
    offenders = []
    for path in [*REPO.glob("launcher/**/*.py"), *REPO.glob("bench/**/*.py")]:
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("launcher/settings"):
            continue
        offenders += [f"{rel}:{line}: {name}" for line, name in _environ_reads(path.read_text(encoding="utf-8"))]
    assert offenders == []
    # The check sees each way of reading around the registry, and leaves other variables alone.
    bad = (
        "import os\nfrom os import environ, getenv\nfrom launcher import settings\n_V = 'KIT_SERVER_URL'\n"
        "a = os.environ['MODEL_PATH']\nb = os.environ.get('SPEC', 'off')\nc = os.getenv('KIT_CONTROL_TOKEN')\n"
        "d = 'PROFILE' in os.environ\ne = environ.get(_V)\nf = getenv(settings.KIT_STATE_DIR.name)\n"
        "ok = os.environ.get('NCCL_DEBUG'), os.environ['PATH'], os.environ.pop('HF_TOKEN', None)\n"
    )
    assert [n for _, n in _environ_reads(bad)] == [
        "MODEL_PATH", "SPEC", "KIT_CONTROL_TOKEN", "PROFILE", "KIT_SERVER_URL", "KIT_STATE_DIR"]


def test_profile_defaults_agree_with_the_registry():
    for path in REPO.glob("profiles/**/*.toml"):
        for name, default in re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}", path.read_text()):
            if name in REGISTRY and REGISTRY[name].shown_default:
                assert REGISTRY[name].shown_default == default, f"{path.name}: ${{{name}:-{default}}}"
                assert "profile" in REGISTRY[name].scope, name


def test_sitecustomize_constants_are_the_registry_names():
    tree = ast.parse((REPO / "sitecustomize" / "sitecustomize.py").read_text())
    consts = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert consts["_KIT_PROFILE_ENV"] == settings.KIT_PROFILE_ENV.name
    assert consts["_KIT_ACTIVE_PROFILE"] == settings.KIT_ACTIVE_PROFILE.name
    assert consts["_KIT_ACTIVE_SPEC"] == settings.KIT_ACTIVE_SPEC.name
    assert set(consts) == {"_KIT_PROFILE_ENV", "_KIT_ACTIVE_PROFILE", "_KIT_ACTIVE_SPEC"}


def test_generated_files_match_the_registry():
    assert (REPO / settings_docs.ENV_EXAMPLE).read_text() == settings_docs.env_example(), "run `make docs`"
    assert (REPO / settings_docs.SETTINGS_MD).read_text() == settings_docs.markdown(), "run `make docs`"


def test_env_example_holds_every_setting_a_user_sets_and_no_secret_value():
    text = settings_docs.env_example()
    assigned = dict(re.findall(r"^([A-Z_0-9]+)=(.*)$", text, re.M))
    assert set(assigned) == {n for n, s in REGISTRY.items() if s.example is not None}
    assert all(assigned[n] == "" for n in settings.secret_names() if n in assigned)
    compose = (REPO / "docker-compose.yml").read_text()
    for name in re.findall(r"\$\{([A-Z_0-9]+)", compose):
        assert name in assigned, f"docker-compose.yml reads {name}; give it an example in the registry"


def test_write_regenerates_both_files(tmp_path):
    rc = settings_docs.main(["--write", str(tmp_path)])
    assert rc == 0
    assert (tmp_path / ".env.example").read_text() == settings_docs.env_example()
    assert (tmp_path / "docs" / "settings.md").read_text().startswith("# Settings")


# ----- one behaviour for a bad value, everywhere -----------------------------------------------------
def _launcher(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.stack
def test_serve_refuses_to_start_on_a_bad_setting_and_writes_nothing(tmp_path):
    state = tmp_path / "state"
    r = _launcher("serve", "--dry-run", "--state-dir", str(state), KIT_START_RETRIES="-1",
                  MODEL_PATH="/m", DRAFT_MODEL_PATH="/d", KIT_PATCH_CHECK="skip")
    assert r.returncode == 2, r.stderr
    assert "KIT_START_RETRIES='-1'" in r.stderr and "Traceback" not in r.stderr
    assert not state.exists()


@pytest.mark.stack
def test_control_api_refuses_to_start_on_a_bad_setting(tmp_path):
    r = subprocess.run([sys.executable, "-m", "launcher.runtime.api.control_api", "--state-dir", str(tmp_path)],
                       cwd=REPO, env=_clean_env(KIT_CONTROL_PORT="http"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "KIT_CONTROL_PORT='http'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.stack
@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (("status",), {"KIT_CONTROL_PORT": "abc"}, "KIT_CONTROL_PORT='abc'"),
        (("status",), {"KIT_CONTROL_URL": "ctl:1"}, "KIT_CONTROL_URL='ctl:1'"),
        (("doctor", "--json"), {"KIT_TP_SIZE": "eight"}, "KIT_TP_SIZE='eight'"),
        (("profiles",), {"KIT_BUILTIN_PROFILES_DIR": ""}, None),
    ],
)
def test_client_commands_exit_2_naming_the_variable(args, env, needle):
    r = _launcher(*args, **env)
    if needle is None:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.stack
def test_settings_command_lists_the_registry_as_json():
    r = _launcher("settings", "--json")
    assert r.returncode == 0, r.stderr
    assert "KIT_CONTROL_TOKEN" in r.stdout and '"secret": true' in r.stdout
    bad = _launcher("settings", "--check", KIT_DRAIN_TIMEOUT_S="soon")
    assert bad.returncode == 2 and "KIT_DRAIN_TIMEOUT_S='soon'" in bad.stderr
