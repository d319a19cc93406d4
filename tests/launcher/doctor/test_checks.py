"""launcher.doctor.checks: each host check's verdict on passing and failing input, and run_host_checks over a fake Probe."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from helpers_doctor import GiB, StatVfs, fake_root, read

from launcher.doctor import checks, nccl
from launcher.doctor import p2p as p2p_mod
from launcher.doctor.probe import CommandResult, DockerState, Probe
from launcher.settings import SettingError

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
    assert checks.gpu_count(8, 8).status == "pass"
    one = checks.gpu_count(1, 8)
    assert one.status == "warn" and "KIT_TP_SIZE=1" in one.fix


@pytest.mark.parametrize("bad", ["x", "0", "-4", "4.5"])
def test_bad_tp_size_is_a_setting_error(bad):
    """KIT_TP_SIZE that is not a whole number >= 1 is an error (exit 2), no longer a silent default of 8."""
    with pytest.raises(SettingError, match="KIT_TP_SIZE") as exc:
        checks.tp_size({"KIT_TP_SIZE": bad})
    assert exc.value.exit_code == 2


def test_topology_and_p2p_checks():
    assert checks.topology("pcie-cross-socket", [[0, 1], [2, 3]]).status == "warn"
    assert checks.topology("pcie-switch", [[0, 1, 2, 3]]).status == "pass"
    assert checks.topology(None, [[0]]).status == "pass"
    broken = checks.p2p(p2p_mod.parse(read("pcie8_p2p_broken.txt")))
    assert broken.status == "warn"
    assert "GPU2-GPU5 NS (not supported)" in broken.detail and "GPU0-GPU7 CNS" in broken.detail
    assert checks.p2p(p2p_mod.parse(read("pcie8_p2p_ok.txt"))).status == "pass"


# --- NCCL ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "status", "needles"),
    [
        ("2.26.2", "fail", ["nccl#2418", "512 KiB", "2.31.2", "known bad"]),
        ("2.28.9", "fail", ["vllm#52504", "CUDA-graph replay", "2.30.4", "nccl#2418"]),
        ("2.27.7", "warn", ["nccl#2418", "untested for", "were not tested there"]),
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


def test_inside_a_container_that_sees_gpus_docker_is_not_a_problem():
    assert checks.docker(DockerState(found=False), in_container=True).status == "pass"
    assert checks.nvidia_runtime(DockerState(found=False), [], in_container=True, gpus_live=True).status == "pass"
    assert checks.nvidia_runtime(DockerState(found=False), [], in_container=True, gpus_live=False).status == "warn"


# --- all host checks over a fake Probe ------------------------------------------------------


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
        return StatVfs(shm)

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
    root = fake_root(tmp_path, "BOOT_IMAGE=/vmlinuz amd_iommu=off pci=noacs", "Y", [])
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
    root = fake_root(tmp_path, H200_CMDLINE + " intel_iommu=on", "N", ["DMA"])
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


# --- power limits ----------------------------------------------------------------------------


def test_power_limit_warns_for_gpus_capped_below_their_default():
    from launcher.doctor.power import PowerLimit, parse

    at_default = checks.power_limit(parse(read("pcie8_power.csv")))
    assert (at_default.name, at_default.status) == ("power-limit", "pass")
    assert at_default.detail == "8 of 8 GPU(s) at or above their default power limit"
    capped = checks.power_limit(parse(read("pcie8_power_capped.csv")))
    assert capped.status == "warn"
    assert "power-capped: GPU 3 at 450 W (default 600 W), GPU 5 at 400 W (default 600 W)" in capped.detail
    assert capped.fix.startswith("`sudo nvidia-smi -i 3,5 -pl 600` restores the default")
    mixed = checks.power_limit([PowerLimit(0, 300.0, 350.0, None, None), PowerLimit(1, 500.0, 600.0, None, None)])
    assert "`sudo nvidia-smi -i 0 -pl 350` and `sudo nvidia-smi -i 1 -pl 600`" in mixed.fix
    unknown = checks.power_limit([PowerLimit(0, None, None, None, None)])
    assert unknown.status == "pass" and "unknown" in unknown.detail
