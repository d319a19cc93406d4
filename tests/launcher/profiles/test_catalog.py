"""launcher.profiles.catalog: the names the Makefile and the loader share, with nothing but the standard library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_profiles import clean_env, profile_toml, write_profiles

from launcher import settings
from launcher.errors import UserError
from launcher.profiles import catalog, loader

ROOT = Path(__file__).resolve().parents[3]

# Runs the module as `python3 -m` does, with every import outside the standard library and `launcher`
# refused: the Makefile runs it with a host's bare python3.
STDLIB_ONLY = """
import runpy, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names and top != "launcher":
            raise ImportError(f"{name} is not in the standard library")
sys.meta_path.insert(0, Refuse())
sys.argv = ["catalog", *sys.argv[1:]]
runpy.run_module("launcher.profiles.catalog", run_name="__main__")
"""


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clean_env(monkeypatch)


def bare(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", STDLIB_ONLY, *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.stack
def test_every_query_runs_with_the_standard_library_alone(tmp_path):
    user = write_profiles(tmp_path / "mine", {"mine.toml": profile_toml("m"), "spec/quick.toml": profile_toml("q")})
    proc = bare("profiles", KIT_PROFILES_DIR=str(user))
    assert proc.returncode == 0, proc.stderr
    assert "mine" in proc.stdout.split() and "baseline" in proc.stdout.split() and "base" not in proc.stdout.split()
    specs = bare("specs", KIT_PROFILES_DIR=str(user))
    assert specs.stdout.split() == ["eagle3", "eagle3-adaptive", "ngram", "off", "quick"], specs.stderr
    assert bare("default-spec").stdout.strip() == settings.default_spec({})
    assert bare("default-spec", SPEC="ngram").stdout.strip() == "ngram"
    models = bare("model-overlays", KIT_PROFILES_DIR=str(user))
    assert models.returncode == 0 and "deepseek-v3 kimi-k2" in models.stdout, models.stderr
    over = bare("compose-override", KIT_PROFILES_DIR=str(user))
    assert over.returncode == 0 and str(user) in over.stdout, over.stderr


def test_the_loader_answers_with_the_catalog(tmp_path, monkeypatch):
    user = write_profiles(tmp_path / "mine", {"mine.toml": profile_toml("m"), "spec/quick.toml": profile_toml("q")})
    monkeypatch.setenv("KIT_PROFILES_DIR", str(user))
    assert loader.available_names() == catalog.available_names()
    assert loader.spec_modes() == catalog.spec_modes()
    assert loader.find_file("quick", loader.SPEC_DIR) == user / "spec" / "quick.toml"


@pytest.mark.stack
def test_model_overlays_come_from_each_folders_model_subfolder(tmp_path, monkeypatch):
    user = write_profiles(tmp_path / "mine", {"model/kimi-k2.toml": profile_toml("mine"),
                                              "model/qwen.toml": profile_toml("q"), "model/not a name.toml": "x"})
    monkeypatch.setenv("KIT_PROFILES_DIR", str(user))
    assert catalog.model_overlays() == loader.model_overlays() == ["deepseek-v3", "kimi-k2", "qwen"]
    assert catalog.find_file("kimi-k2", catalog.MODEL_DIR) == user / "model" / "kimi-k2.toml"  # the user's wins
    assert bare("model-overlays", KIT_PROFILES_DIR=str(user)).stdout.split() == ["deepseek-v3", "kimi-k2", "qwen"]
    with pytest.raises(UserError, match="model overlay name"):
        catalog.find_file("a/b", catalog.MODEL_DIR)


def test_compose_override_mounts_each_folder_read_only_at_its_own_path(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b$c").mkdir()
    env = {"KIT_PROFILES_DIR": f"a:{tmp_path / 'b$c'}::a"}
    over = catalog.compose_override(env, cwd=tmp_path)
    assert set(over["services"]) == {"server", "bench"}
    for svc in over["services"].values():
        # relative folders are taken from where make runs; duplicates once; '$' escaped for compose
        assert svc["environment"] == {"KIT_PROFILES_DIR": f"{tmp_path / 'a'}:{tmp_path / 'b$$c'}"}
        assert svc["volumes"] == [
            {"type": "bind", "source": str(tmp_path / "a"), "target": str(tmp_path / "a"), "read_only": True},
            {"type": "bind", "source": str(tmp_path / "b$$c"), "target": str(tmp_path / "b$$c"), "read_only": True},
        ]


@pytest.mark.stack
def test_compose_override_refuses_a_folder_that_does_not_exist(tmp_path):
    with pytest.raises(UserError, match=r"KIT_PROFILES_DIR: .*/nope is not a folder on this host; create it"):
        catalog.compose_override({"KIT_PROFILES_DIR": str(tmp_path / "nope")})
    proc = bare("compose-override", KIT_PROFILES_DIR=str(tmp_path / "nope"))
    assert proc.returncode == 2 and "nope is not a folder" in proc.stderr


@pytest.mark.stack
def test_bug_6_a_toml_file_whose_name_is_no_profile_name_is_found_but_never_a_name(tmp_path, monkeypatch):
    """Defect 6: `Ünï.toml` was silently missing from every listing; the catalog now names such files (the
    loader lists them invalid) and still never offers them as a name (the Makefile's `profiles`)."""
    user = write_profiles(tmp_path / "mine", {"Ünï.toml": profile_toml("u"), "My Profile.toml": profile_toml("m"),
                                              "fine.toml": profile_toml("f"), "notes.txt": "x"})
    (user / "dir.toml").mkdir()
    (user / "Gone.toml").symlink_to(user / "missing")
    monkeypatch.setenv("KIT_PROFILES_DIR", str(user))
    assert catalog.misnamed_files() == [user / "My Profile.toml", user / "Ünï.toml"]
    assert "fine" in catalog.available_names() and not {"Ünï", "My Profile"} & set(catalog.available_names())
    assert bare("profiles", KIT_PROFILES_DIR=str(user)).stdout.split().count("fine") == 1
