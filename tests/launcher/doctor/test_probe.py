"""launcher.doctor.probe: what the doctor reads from a (fake) root, from docker and from nvidia-smi on PATH."""

from __future__ import annotations

import os

from helpers_doctor import fake_root

from launcher.doctor.probe import SMI_ARGS, CommandResult, DockerState, Probe


def test_in_container_from_dockerenv_or_containerenv(tmp_path):
    (tmp_path / ".dockerenv").write_text("")
    assert Probe(root=tmp_path).in_container() is True
    assert Probe(root=tmp_path / "elsewhere").in_container() is False
    podman = tmp_path / "podman"
    (podman / "run").mkdir(parents=True)
    (podman / "run" / ".containerenv").write_text("")
    assert Probe(root=podman).in_container() is True


def test_probe_reads_module_state_and_iommu_groups(tmp_path):
    root = fake_root(tmp_path, "quiet", None, ["identity", "DMA"])
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


def test_nvidia_smi_runs_the_query_found_on_path():
    seen: list[list[str]] = []

    def run(argv: list[str]) -> CommandResult:
        seen.append(argv)
        return CommandResult(0, "out", "")

    probe = Probe(which=lambda n: "/opt/bin/nvidia-smi" if n == "nvidia-smi" else None, run=run)
    for what in ("topo", "p2p", "gpus"):
        assert probe.nvidia_smi(what).stdout == "out"
    assert seen == [["/opt/bin/nvidia-smi", *SMI_ARGS[w]] for w in ("topo", "p2p", "gpus")]
    assert SMI_ARGS["gpus"] == ["--query-gpu=name,compute_cap,driver_version,pci.bus_id", "--format=csv"]
    assert Probe(which=lambda n: None).nvidia_smi("topo") is None  # not on PATH


def test_command_result_first_error_line():
    assert CommandResult(9, "", "\n  NVIDIA-SMI has failed\nmore\n").first_error_line() == "NVIDIA-SMI has failed"
    assert CommandResult(9, "only stdout\n", "").first_error_line() == "only stdout"
    assert CommandResult(9, "", "").first_error_line() == "exit status 9"


def test_rdma_devices_from_sys_class_infiniband(tmp_path):
    """Each RDMA device the kernel registered is a directory under /sys/class/infiniband."""
    ib = tmp_path / "sys" / "class" / "infiniband"
    for name in ("mlx5_1", "mlx5_0"):
        (ib / name).mkdir(parents=True)
    assert Probe(root=tmp_path).rdma_devices() == ["mlx5_0", "mlx5_1"]


def test_rdma_devices_none_when_sysfs_has_no_infiniband_class_and_unknown_without_sysfs(tmp_path):
    (tmp_path / "host" / "sys" / "class" / "net").mkdir(parents=True)
    assert Probe(root=tmp_path / "host").rdma_devices() == []  # sysfs read, no RDMA driver: none
    assert Probe(root=tmp_path / "bare").rdma_devices() is None  # nothing read: unknown
