"""Host checks: each verdict on passing and failing input, and the Probe reading a fake root."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from launcher.doctor import checks, nccl
from launcher.doctor import p2p as p2p_mod
from launcher.doctor.probe import CommandResult, DockerState, Probe

FIX = Path(__file__).parent / "fixtures" / "doctor"
GiB = 1 << 30


# --- kernel command line -------------------------------------------------------------------

H200_CMDLINE = "console=ttyS0 quiet reboot=k panic=1 pci=realloc=off swiotlb=noforce -- --addr 0.0.0.0:2024"


@pytest.mark.parametrize(
    ("cmdline", "groups", "status", "needle"),
    [
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt", [], "pass", "passthrough"),
        ("BOOT_IMAGE=/vmlinuz amd_iommu=off", [], "pass", "IOMMU off"),
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1", ["identity", "identity"], "pass", "identity"),
        (H200_CMDLINE, [], "pass", "no IOMMU translation"),
        ("BOOT_IMAGE=/vmlinuz intel_iommu=on pci=noacs", ["identity"], "pass", "ACS relaxed"),
        ("BOOT_IMAGE=/vmlinuz intel_iommu=on", [], "warn", "intel_iommu=on"),
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1", ["DMA-FQ", "DMA-FQ"], "warn", "DMA-FQ"),
        ("BOOT_IMAGE=/vmlinuz iommu=pt", ["DMA"], "warn", "IOMMU group"),
        ("BOOT_IMAGE=/vmlinuz intel_iommu=on pci=realloc,noacs", [], "warn", "intel_iommu=on"),
    ],
)
def test_kernel_cmdline(cmdline, groups, status, needle):
    c = checks.kernel_cmdline(cmdline, groups)
    assert c.status == status, c.detail
    assert needle in c.detail
    if status != "pass":
        assert "iommu=pt" in c.fix and "pci=noacs" in c.fix


def test_kernel_cmdline_mentions_acs_only_when_not_relaxed():
    assert "ACS not relaxed" in checks.kernel_cmdline("intel_iommu=on", []).detail
    assert "ACS not relaxed" not in checks.kernel_cmdline("intel_iommu=on pci=noacs", []).detail
    assert checks.kernel_cmdline(None, []).status == "warn"


# --- uvm_disable_hmm -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loaded", "value", "status"),
    [(True, "Y", "pass"), (True, "1", "pass"), (True, None, "pass"), (True, "N", "warn"), (True, "0", "warn"), (False, None, "warn")],
)
def test_uvm_hmm(loaded, value, status):
    c = checks.uvm_hmm(loaded, value)
    assert c.status == status
    if status == "warn":
        assert "uvm_disable_hmm=1" in c.fix


# --- /dev/shm, memlock, GPU count ----------------------------------------------------------


def test_shm():
    assert checks.shm(128 * GiB, 8).status == "pass"
    small = checks.shm(4 * GiB, 8)
    assert small.status == "warn" and "under 8 GiB" in small.detail and "--shm-size=8g" in small.fix
    assert checks.shm(4 * GiB, 4).status == "pass"
    docker_default = checks.shm(64 << 20, 8)
    assert docker_default.status == "fail" and "64 MiB" in docker_default.detail
    assert checks.shm(None, 8).status == "warn"


def test_memlock():
    assert checks.memlock(resource.RLIM_INFINITY).status == "pass"
    c = checks.memlock(8192 * 1024)
    assert c.status == "warn" and "8192 KiB" in c.detail and "memlock=-1" in c.fix


def test_gpu_count_and_tp_size():
    assert checks.tp_size({}) == 8
    assert checks.tp_size({"KIT_TP_SIZE": "4"}) == 4
    assert checks.tp_size({"KIT_TP_SIZE": "x"}) == 8
    assert checks.gpu_count(8, 8).status == "pass"
    one = checks.gpu_count(1, 8)
    assert one.status == "warn" and "KIT_TP_SIZE=1" in one.fix


def test_topology_and_p2p_checks():
    assert checks.topology("pcie-cross-socket", [[0, 1], [2, 3]]).status == "warn"
    assert checks.topology("pcie-switch", [[0, 1, 2, 3]]).status == "pass"
    assert checks.topology(None, [[0]]).status == "pass"
    broken = checks.p2p(p2p_mod.parse((FIX / "pcie8_p2p_broken.txt").read_text()))
    assert broken.status == "warn"
    assert "GPU2-GPU5 NS (not supported)" in broken.detail and "GPU0-GPU7 CNS" in broken.detail
    assert checks.p2p(p2p_mod.parse((FIX / "pcie8_p2p_ok.txt").read_text())).status == "pass"


# --- NCCL ----------------------------------------------------------------------------------


def test_nccl_version_parsing():
    assert nccl.parse_version("2.28.9") == (2, 28, 9)
    assert nccl.parse_version((2, 28, 9)) == (2, 28, 9)
    assert nccl.parse_version(22809) == (2, 28, 9)
    assert nccl.parse_version(2708) == (2, 7, 8)
    assert nccl.parse_version("2.21.5+cuda12.4") == (2, 21, 5)
    assert nccl.parse_version("two") is None


@pytest.mark.parametrize(
    ("version", "status", "needles"),
    [
        ("2.26.2", "fail", ["nccl#2418", "512 KiB", "2.31.2", "known bad"]),
        ("2.28.9", "fail", ["vllm#52504", "CUDA-graph replay", "2.30.4", "nccl#2418"]),
        ("2.27.7", "warn", ["nccl#2418", "before the fix"]),
        ("2.30.4", "warn", ["nccl#2418"]),
        ("2.31.2", "pass", ["no known-bad"]),
        ("2.21.5", "pass", ["no known-bad"]),
    ],
)
def test_nccl_known_bad(version, status, needles):
    c = checks.nccl_check(nccl.parse_version(version), "test")
    assert c.status == status
    for n in needles:
        assert n in c.detail
    if status != "pass":
        assert "2.31.2" in c.fix  # the newest fix among the matched problems


def test_nccl_unknown_is_a_warning():
    c = checks.nccl_check(None, "not found")
    assert c.status == "warn" and "--nccl-version" in c.fix


def test_nccl_probes_without_a_library_give_none():
    assert nccl.from_library(("libnccl-does-not-exist.so.2",)) is None


# --- Docker and the NVIDIA runtime ----------------------------------------------------------


def test_docker_and_nvidia_runtime():
    assert checks.docker(DockerState(found=False)).status == "warn"
    assert checks.docker(DockerState(found=True, reachable=False, message="Cannot connect")).status == "warn"
    up = DockerState(found=True, reachable=True, runtimes=["io.containerd.runc.v2", "nvidia", "runc"])
    assert checks.docker(up).status == "pass"
    assert checks.nvidia_runtime(up, []).status == "pass"
    plain = DockerState(found=True, reachable=True, runtimes=["runc"])
    missing = checks.nvidia_runtime(plain, [])
    assert missing.status == "fail" and "nvidia-ctk runtime configure" in missing.fix
    assert checks.nvidia_runtime(plain, ["nvidia-ctk"]).status == "pass"
    assert checks.nvidia_runtime(DockerState(found=False), []).status == "warn"


def test_inside_a_container_that_sees_gpus_docker_is_not_a_problem(tmp_path):
    assert checks.docker(DockerState(found=False), in_container=True).status == "pass"
    assert checks.nvidia_runtime(DockerState(found=False), [], in_container=True, gpus_live=True).status == "pass"
    assert checks.nvidia_runtime(DockerState(found=False), [], in_container=True, gpus_live=False).status == "warn"
    (tmp_path / ".dockerenv").write_text("")
    assert Probe(root=tmp_path).in_container() is True
    assert Probe(root=tmp_path / "elsewhere").in_container() is False


# --- Probe over a fake root ------------------------------------------------------------------


def _fake_root(tmp_path: Path, cmdline: str, hmm: str | None, iommu: list[str]) -> Path:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cmdline").write_text(cmdline + "\n")
    if hmm is not None:
        params = root / "sys" / "module" / "nvidia_uvm" / "parameters"
        params.mkdir(parents=True)
        (params / "uvm_disable_hmm").write_text(hmm + "\n")
    for i, kind in enumerate(iommu):
        g = root / "sys" / "kernel" / "iommu_groups" / str(i)
        g.mkdir(parents=True)
        (g / "type").write_text(kind + "\n")
    (root / "dev" / "shm").mkdir(parents=True)
    return root


class _StatVfs:
    def __init__(self, size: int):
        self.f_blocks, self.f_frsize = size // 4096, 4096


def _probe(root: Path, *, shm: int, memlock: int, runtimes: str | None, tools: tuple[str, ...] = ()) -> Probe:
    seen: list[str] = []

    def which(name: str) -> str | None:
        if name == "docker" and runtimes is not None:
            return "/usr/bin/docker"
        return f"/usr/bin/{name}" if name in tools else None

    def run(argv: list[str]) -> CommandResult:
        seen.append(argv[1])
        return CommandResult(0, runtimes or "", "")

    def statvfs(path: str):
        assert path == str(root / "dev" / "shm")
        return _StatVfs(shm)

    return Probe(
        root=root,
        which=which,
        run=run,
        statvfs=statvfs,
        getrlimit=lambda _kind: (memlock, memlock),
        nccl_detect=lambda: ((2, 27, 7), "fake"),
        environ={"KIT_TP_SIZE": "8"},
    )


def test_healthy_host_passes_every_host_check(tmp_path):
    root = _fake_root(tmp_path, "BOOT_IMAGE=/vmlinuz amd_iommu=off pci=noacs", "Y", [])
    probe = _probe(root, shm=32 * GiB, memlock=resource.RLIM_INFINITY, runtimes='{"nvidia":{},"runc":{}}')
    found, version = checks.run_host_checks(probe, nccl_override="2.31.2")
    assert version == "2.31.2"
    assert {c.name: c.status for c in found} == {
        "kernel-cmdline": "pass",
        "uvm_disable_hmm": "pass",
        "shm": "pass",
        "memlock": "pass",
        "nccl": "pass",
        "docker": "pass",
        "nvidia-container": "pass",
    }


def test_unfit_host_gets_a_verdict_and_fix_for_each_problem(tmp_path):
    root = _fake_root(tmp_path, H200_CMDLINE + " intel_iommu=on", "N", ["DMA"])
    probe = _probe(root, shm=64 << 20, memlock=64 * 1024, runtimes='{"runc":{}}')
    found, version = checks.run_host_checks(probe)
    assert version == "2.27.7"  # from the probe's detector
    by_name = {c.name: c for c in found}
    assert by_name["kernel-cmdline"].status == "warn"
    assert by_name["uvm_disable_hmm"].status == "warn"
    assert by_name["shm"].status == "fail"
    assert by_name["memlock"].status == "warn"
    assert by_name["nccl"].status == "warn" and "fake" in by_name["nccl"].detail
    assert by_name["nvidia-container"].status == "fail"
    assert all(c.fix for c in found if c.status != "pass")


def test_probe_reads_module_state_and_iommu_groups(tmp_path):
    root = _fake_root(tmp_path, "quiet", None, ["identity", "DMA"])
    probe = Probe(root=root)
    assert probe.cmdline() == "quiet"
    assert probe.uvm_disable_hmm() == (False, None)
    assert probe.iommu_group_types() == ["identity", "DMA"]
    assert probe.shm_bytes() == os.statvfs(root / "dev" / "shm").f_blocks * os.statvfs(root / "dev" / "shm").f_frsize
    empty = Probe(root=tmp_path / "nothing")
    assert empty.cmdline() is None and empty.iommu_group_types() == [] and empty.shm_bytes() is None


def test_docker_probe_states():
    def probe_with(rc: int, out: str, err: str = "") -> DockerState:
        return Probe(which=lambda n: "/bin/docker" if n == "docker" else None, run=lambda argv: CommandResult(rc, out, err)).docker()

    assert probe_with(0, '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}}\n').runtimes == ["nvidia", "runc"]
    down = probe_with(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n")
    assert (down.found, down.reachable) == (True, False) and "Cannot connect" in down.message
    assert Probe(which=lambda n: None).docker().found is False


def test_nccl_detect_prefers_torch_then_the_library(monkeypatch):
    monkeypatch.setattr(nccl, "from_torch", lambda: (2, 27, 3))
    monkeypatch.setattr(nccl, "from_library", lambda: (2, 21, 5))
    assert nccl.detect() == ((2, 27, 3), "torch.cuda.nccl.version()")
    monkeypatch.setattr(nccl, "from_torch", lambda: None)
    assert nccl.detect() == ((2, 21, 5), "libnccl.so ncclGetVersion")
    monkeypatch.setattr(nccl, "from_library", lambda: None)
    version, source = nccl.detect()
    assert version is None and "not found" in source
