"""launcher/runtime/records/patch_record.py and admission.py: the launcher's reader of patches/apply.py's record."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from launcher.errors import RuntimeFailure, UserError
from launcher.runtime import admission
from launcher.runtime.records import patch_record

REPO = Path(__file__).resolve().parents[4]
GOOD = {"sglang_version": "0.5.23", "patches": {"sm120-allreduce-fusion": "ab" * 32}}
DAMAGED = [
    "not json",
    "[]",
    '{"plan": null}',
    '{"sglang_version": "0.5.23"}',
    '{"sglang_version": 5, "patches": {}}',
    '{"sglang_version": "0.5.23", "patches": ["x"]}',
    '{"sglang_version": "0.5.23", "patches": {"x": 1}}',
]


def _apply_module():
    spec = importlib.util.spec_from_file_location("kit_patches_apply_reader", REPO / "patches" / "apply.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    """A `sglang` package on sys.path whose record the test writes."""
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    return pkg / "kit_patches.json"


def test_both_readers_accept_the_good_record(tmp_path, fake_sglang):
    fake_sglang.write_text(json.dumps(GOOD))
    assert patch_record.installed() == GOOD["patches"]
    assert _apply_module().read_record(fake_sglang.parent.parent).patches == GOOD["patches"]


@pytest.mark.parametrize("text", DAMAGED)
def test_both_readers_refuse_the_same_damaged_records(fake_sglang, text):
    fake_sglang.write_text(text)
    with pytest.raises(RuntimeFailure, match="kit_patches.json"):
        patch_record.installed()
    with pytest.raises(ValueError, match="kit_patches.json"):
        _apply_module().read_record(fake_sglang.parent.parent)


def test_no_record_means_no_patches(fake_sglang):
    assert patch_record.installed() == {} and patch_record.missing(["sm120-allreduce-fusion"]) == ["sm120-allreduce-fusion"]
    assert patch_record.missing([]) == []


def test_admission_enforces_patches_unless_the_setting_says_skip(fake_sglang, monkeypatch):
    monkeypatch.setenv("MODEL_PATH", "/m")
    monkeypatch.setenv("DRAFT_MODEL_PATH", "/d")
    monkeypatch.delenv("KIT_PATCH_CHECK", raising=False)
    monkeypatch.setattr(admission.sglang_args, "available", lambda: False)
    with pytest.raises(UserError, match="needs SGLang patch\\(es\\) sm120-allreduce-fusion.*KIT_PATCH_CHECK=skip"):
        admission.validated_plan("fused", "off")
    assert admission.validated_plan("baseline", "off").name == "baseline"  # needs no patch
    monkeypatch.setenv("KIT_PATCH_CHECK", "skip")
    assert admission.patch_check() == "skip"
    assert admission.validated_plan("fused", "off").name == "fused"
    fake_sglang.write_text(json.dumps(GOOD))
    monkeypatch.setenv("KIT_PATCH_CHECK", "enforce")
    assert admission.validated_plan("fused", "off").patches == ["sm120-allreduce-fusion"]


@pytest.mark.parametrize("damage", ["fifo", "link", "huge"])
def test_a_record_that_is_no_regular_file_or_too_large_is_an_error_never_a_hang(fake_sglang, tmp_path, damage):
    import os

    if damage == "fifo":
        os.mkfifo(fake_sglang)
    elif damage == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps(GOOD))
        fake_sglang.symlink_to(tmp_path / "elsewhere.json")
    else:
        with open(fake_sglang, "wb") as fh:
            fh.truncate(300 << 20)
    with pytest.raises(RuntimeFailure, match="kit_patches.json: not a readable patch record"):
        patch_record.installed()
