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


def test_nccl_detect_reads_the_nvidia_nccl_wheel_before_the_loader_path(monkeypatch, tmp_path):
    """The image installs a newer nvidia-nccl wheel: that file, not the loader's, is what CUDA torch loads."""
    lib = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setattr(nccl.sys, "path", ["", str(tmp_path / "elsewhere"), str(tmp_path)])
    assert nccl.wheel_library() == lib
    asked = []
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): asked.append(names) or (2, 32, 3))
    assert nccl.detect() == ((2, 32, 3), f"{lib} ncclGetVersion")
    assert asked == [(str(lib),)]
    monkeypatch.setattr(nccl.sys, "path", [str(tmp_path / "elsewhere")])
    assert nccl.wheel_library() is None


def test_require_passes_only_when_every_answering_source_is_new_enough(monkeypatch, capsys):
    monkeypatch.setattr(nccl, "wheel_library", lambda: None)
    monkeypatch.setattr(nccl, "from_torch", lambda: (2, 32, 3))
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): None)
    assert nccl.main(["--require", "2.31.2"]) == 0
    assert "torch.cuda.nccl.version(): 2.32.3" in capsys.readouterr().out
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): (2, 30, 7))  # the base's, still loaded
    assert nccl.main(["--require", "2.31.2"]) == 1
    assert "NCCL 2.30.7 found where 2.31.2 or newer is required" in capsys.readouterr().err
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): None)
    assert nccl.main(["--require", "2.31.2"]) == 1
    assert nccl.main(["--require", "two"]) == 2
    assert nccl.main([]) == 0  # report only
