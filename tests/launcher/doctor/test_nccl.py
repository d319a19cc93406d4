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


def test_nccl_detect_prefers_the_loaded_library_and_asks_torch_last(monkeypatch):
    """torch.cuda.nccl.version() is what torch was compiled against (2.30.7 with the wheel swapped)."""
    monkeypatch.setattr(nccl, "from_process", lambda: [(nccl.Path("/site/nvidia/nccl/lib/libnccl.so.2"), (2, 31, 2))])
    monkeypatch.setattr(nccl, "from_torch", lambda: (2, 30, 7))
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): (2, 21, 5))
    assert nccl.detect() == ((2, 31, 2), "/site/nvidia/nccl/lib/libnccl.so.2 (loaded by this process) ncclGetVersion")
    monkeypatch.setattr(nccl, "from_process", lambda: [])
    monkeypatch.setattr(nccl, "wheel_library", lambda: None)
    assert nccl.detect() == ((2, 21, 5), "libnccl.so ncclGetVersion")
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): None)
    assert nccl.detect() == ((2, 30, 7), "torch.cuda.nccl.version() (the NCCL torch was compiled against)")
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    version, source = nccl.detect()
    assert version is None and "not found" in source


def test_loaded_libraries_reads_the_maps(tmp_path):
    maps = tmp_path / "maps"
    lib = "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
    maps.write_text(
        f"7f5e38a00000-7f5e38c00000 r--p 00000000 fd:01 123 {lib}\n"
        f"7f5e38c00000-7f5e39c00000 r-xp 00200000 fd:01 123 {lib}\n"
        "7f5e40000000-7f5e40100000 r--p 00000000 fd:01 124 /tmp/nccl-pin/venv/libcudart.so.13\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
    )
    assert nccl.loaded_libraries(maps) == [nccl.Path(lib)]
    assert nccl.loaded_libraries(tmp_path / "none") == []


def test_nccl_detect_reads_the_nvidia_nccl_wheel_before_the_loader_path(monkeypatch, tmp_path):
    """The image installs another nvidia-nccl wheel: that file, not the loader's, is what CUDA torch loads."""
    lib = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setattr(nccl.sys, "path", ["", str(tmp_path / "elsewhere"), str(tmp_path)])
    assert nccl.wheel_library() == lib
    asked = []
    monkeypatch.setattr(nccl, "from_process", lambda: [])
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): asked.append(names) or (2, 32, 3))
    assert nccl.detect() == ((2, 32, 3), f"{lib} ncclGetVersion")
    assert asked == [(str(lib),)]
    monkeypatch.setattr(nccl.sys, "path", [str(tmp_path / "elsewhere")])
    assert nccl.wheel_library() is None


LOADED = nccl.Path("/site/nvidia/nccl/lib/libnccl.so.2")


def test_require_checks_the_loaded_library_not_what_torch_was_compiled_against(monkeypatch, capsys):
    """CUDA torch 2.14.1 with nvidia-nccl-cu13 2.31.2 over its 2.30.7: torch says 2.30.7, the process
    runs 2.31.2 (docs/evidence/nccl-pin/2-pinned-wheel-over-torch.txt); the build check must pass."""
    monkeypatch.setattr(nccl, "wheel_library", lambda: None)
    monkeypatch.setattr(nccl, "from_torch", lambda: (2, 30, 7))
    monkeypatch.setattr(nccl, "from_process", lambda: [(LOADED, (2, 31, 2))])
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): (2, 31, 2))
    assert nccl.main(["--require", "2.31.2", "--pinned", "nvidia-nccl-cu13==2.31.2"]) == 0
    out = capsys.readouterr().out
    assert f"libnccl loaded by this process ({LOADED}): 2.31.2" in out
    assert "torch.cuda.nccl.version() (compiled against; not checked): 2.30.7" in out


def test_require_and_pinned_fail_on_another_loaded_release(monkeypatch, capsys):
    monkeypatch.setattr(nccl, "wheel_library", lambda: None)
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    monkeypatch.setattr(nccl, "from_library", lambda names=("libnccl.so.2",): None)
    monkeypatch.setattr(nccl, "from_process", lambda: [(LOADED, (2, 30, 7))])  # the base's, still loaded
    assert nccl.main(["--require", "2.31.2"]) == 1
    assert "NCCL 2.30.7 found where 2.31.2 or newer is required" in capsys.readouterr().err
    monkeypatch.setattr(nccl, "from_process", lambda: [(LOADED, (2, 32, 3))])  # the range's newest
    assert nccl.main(["--require", "2.31.2"]) == 0
    assert nccl.main(["--require", "2.31.2", "--pinned", "nvidia-nccl-cu13==2.31.2"]) == 1
    assert "NCCL 2.32.3 found where nvidia-nccl-cu13==2.31.2 was installed" in capsys.readouterr().err
    monkeypatch.setattr(nccl, "from_process", lambda: [(LOADED, (2, 31, 2)), (nccl.Path("/usr/lib/libnccl.so.2"), (2, 31, 2))])
    assert nccl.main(["--require", "2.31.2"]) == 1
    assert "2 NCCL libraries mapped in one process" in capsys.readouterr().err
    monkeypatch.setattr(nccl, "from_process", lambda: [])
    assert nccl.main(["--require", "2.31.2"]) == 1
    assert nccl.main(["--require", "two"]) == 2
    assert nccl.main([]) == 0  # report only


def test_pinned_version_reads_one_exact_version():
    assert nccl.pinned_version("nvidia-nccl-cu13==2.31.2") == (2, 31, 2)
    assert nccl.pinned_version("nvidia-nccl-cu13>=2.31.2,<3") is None
    assert nccl.pinned_version(None) is None and nccl.pinned_version("base") is None
