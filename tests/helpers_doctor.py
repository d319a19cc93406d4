"""Shared doctor test helpers: the saved nvidia-smi fixtures, fake /proc and /sys roots, stub Probes."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from launcher.doctor.probe import SMI_ARGS, CommandResult, Probe
from launcher.doctor.textfmt import FormatError

FIX = Path(__file__).parent / "fixtures" / "doctor"
GiB = 1 << 30
# The three saved nvidia-smi outputs (topo -m, topo -p2p r, --query-gpu CSV) of each fixture host.
HOSTS = {
    "pcie8": ("pcie8_dual_socket_topo.txt", "pcie8_p2p_ok.txt", "pcie8_gpus.csv"),
    "pcie8-broken": ("pcie8_dual_socket_topo.txt", "pcie8_p2p_broken.txt", "pcie8_gpus.csv"),
    "nvlink8": ("nvlink8_topo.txt", "nvlink8_p2p.txt", "nvlink8_gpus.csv"),
    "switch4": ("switch4_topo.txt", "switch4_p2p.txt", "switch4_gpus.csv"),
    "h200x1": ("h200x1_topo.txt", "h200x1_p2p.txt", "h200x1_gpus.csv"),
}


def read(name: str) -> str:
    return (FIX / name).read_text()


def files(host: str) -> dict[str, Path]:
    t, p, g = HOSTS[host]
    return {"topo": FIX / t, "p2p": FIX / p, "gpus": FIX / g}


def file_args(host: str) -> list[str]:
    f = files(host)
    return ["--topo-file", str(f["topo"]), "--p2p-file", str(f["p2p"]), "--gpus-file", str(f["gpus"])]


def fake_root(tmp_path: Path, cmdline: str, hmm: str | None, iommu: list[str]) -> Path:
    """A /proc, /sys and /dev/shm under tmp_path/root: the kernel command line, uvm_disable_hmm, IOMMU groups."""
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


def healthy_root(tmp_path: Path) -> Path:
    """A root every kernel check passes on: IOMMU passthrough, ACS relaxed, HMM disabled."""
    return fake_root(tmp_path, "BOOT_IMAGE=/vmlinuz iommu=pt pci=noacs", "Y", [])


class StatVfs:
    """What os.statvfs returns, for a filesystem of `size` bytes."""

    def __init__(self, size: int):
        self.f_blocks, self.f_frsize = size // 4096, 4096


def stub_probe(tmp_path: Path, environ: dict[str, str] | None = None) -> Probe:
    """A healthy host with no nvidia-smi and no Docker: only the given files describe the GPUs."""
    return Probe(
        root=healthy_root(tmp_path),
        which=lambda name: None,
        run=lambda argv: CommandResult(127, "", "unexpected"),
        statvfs=lambda path: StatVfs(32 * GiB),
        getrlimit=lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        nccl_detect=lambda: ((2, 31, 2), "stub"),
        environ=environ if environ is not None else {},
    )


def live_probe(host: dict[str, str], rc: int = 0, stderr: str = "") -> Probe:
    """nvidia-smi on PATH answering each query with the named fixture file (or failing with `rc`); a query
    `host` names no file for (the optional power query) fails as an nvidia-smi without that field would."""
    names = {tuple(SMI_ARGS[what]): name for what, name in host.items()}

    def run(argv: list[str]) -> CommandResult:
        if rc != 0:
            return CommandResult(rc, "", stderr)
        if tuple(argv[1:]) not in names:
            return CommandResult(2, "", f'Field "{argv[1]}" is not a valid field to query.')
        return CommandResult(0, (FIX / names[tuple(argv[1:])]).read_text(), "")

    return Probe(which=lambda n: "/usr/bin/nvidia-smi" if n == "nvidia-smi" else None, run=run, environ={})


def assert_format_error(parser, text: str, lineno: int, needle: str) -> None:
    """`parser(text, "saved.txt")` raises a FormatError (exit 2) naming the file, the line number and `needle`."""
    with pytest.raises(FormatError) as err:
        parser(text, "saved.txt")
    msg = str(err.value)
    assert msg.startswith(f"saved.txt:{lineno}: ")
    assert needle in msg
    assert err.value.exit_code == 2
