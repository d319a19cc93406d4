"""launcher.doctor.nccl: NCCL version parsing, the known-bad releases, and where the version is detected from."""

from __future__ import annotations

from launcher.doctor import nccl


def test_nccl_version_parsing():
    assert nccl.parse_version("2.28.9") == (2, 28, 9)
    assert nccl.parse_version((2, 28, 9)) == (2, 28, 9)
    assert nccl.parse_version(22809) == (2, 28, 9)
    assert nccl.parse_version(2708) == (2, 7, 8)
    assert nccl.parse_version("2.21.5+cuda12.4") == (2, 21, 5)
    assert nccl.parse_version("two") is None


def test_known_bad_problems_fail_the_reported_release_and_warn_until_the_fix():
    assert {kb.ref: level for level, kb in nccl.problems((2, 28, 9))} == {"nccl#2418": "warn", "vllm#52504": "fail"}
    assert [(level, kb.ref) for level, kb in nccl.problems((2, 26, 2))] == [("fail", "nccl#2418")]
    assert nccl.problems((2, 31, 2)) == [] and nccl.problems((2, 21, 5)) == []
    assert nccl.fmt((2, 28, 9)) == "2.28.9"


def test_nccl_probes_without_a_library_give_none():
    assert nccl.from_library(("libnccl-does-not-exist.so.2",)) is None


def test_nccl_detect_prefers_torch_then_the_library(monkeypatch):
    monkeypatch.setattr(nccl, "from_torch", lambda: (2, 27, 3))
    monkeypatch.setattr(nccl, "from_library", lambda: (2, 21, 5))
    assert nccl.detect() == ((2, 27, 3), "torch.cuda.nccl.version()")
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    assert nccl.detect() == ((2, 21, 5), "libnccl.so ncclGetVersion")
    monkeypatch.setattr(nccl, "from_library", lambda: None)
    version, source = nccl.detect()
    assert version is None and "not found" in source
