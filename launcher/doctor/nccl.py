"""NCCL version: where to find it, and which releases are known to break this workload."""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

Version = tuple[int, int, int]


@dataclass(frozen=True)
class KnownBad:
    reported: Version  # the release the problem was reported on
    fixed: Version  # the first release reported without it (not necessarily where a fix landed)
    ref: str
    what: str
    evidence: str  # what the report shows about `fixed`, in its own terms


# docs/evidence.md, "NCCL on 8× PCIe". Releases after `reported` and before `fixed` were not tested in
# the report, so they get a warning; the reported release itself fails.
KNOWN_BAD = (
    KnownBad((2, 26, 2), (2, 31, 2), "nccl#2418", "illegal memory access in all-reduces of 512 KiB or more (2x RTX PRO 6000, PCIe only)",
             "2.31.2 passed the same test on that host; releases in between were not tested there"),
    KnownBad((2, 28, 9), (2, 30, 4), "vllm#52504", "deadlock on CUDA-graph replay (reported cross-node)", "fixed in 2.30.4"),
)


def fmt(v: Version) -> str:
    return ".".join(map(str, v))


def parse_version(value: str | int | tuple | list | None) -> Version | None:
    """Accept "2.28.9", (2, 28, 9) or NCCL's integer code (22809; 2708 before 2.9)."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        parts = [int(x) for x in value[:3]]
        return tuple((parts + [0, 0, 0])[:3])  # type: ignore[return-value]
    if isinstance(value, int):
        if value >= 10000:
            return (value // 10000, (value % 10000) // 100, value % 100)
        return (value // 1000, (value % 1000) // 100, value % 100)
    text = str(value).strip().split("+")[0]
    try:
        parts = [int(x) for x in text.split(".")]
    except ValueError:
        return None
    if not parts or len(parts) > 3:
        return None
    return tuple((parts + [0, 0])[:3])  # type: ignore[return-value]


def from_torch() -> Version | None:
    """torch.cuda.nccl.version(): the NCCL torch was *compiled* against (NCCL_MAJOR/MINOR/PATCH of its
    build, pytorch torch/csrc/cuda/nccl.cpp `version()`), not the library it loads: with the wheel
    replaced it still says 2.30.7 (docs/evidence/nccl-pin/). None when torch is missing or built
    without NCCL (CPU wheels)."""
    try:
        import torch  # noqa: PLC0415 - optional and slow to import

        return parse_version(torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - any failure means "torch cannot tell"
        return None


def from_library(names: tuple[str, ...] = ("libnccl.so.2", "libnccl.so")) -> Version | None:
    """ncclGetVersion from the shared library the dynamic loader finds."""
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        code = ctypes.c_int(0)
        try:
            if lib.ncclGetVersion(ctypes.byref(code)) == 0 and code.value > 0:
                return parse_version(code.value)
        except AttributeError:
            continue
    return None


def loaded_libraries(maps: str | Path = "/proc/self/maps") -> list[Path]:
    """The libnccl files this process has mapped, in order of first appearance."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return []
    seen: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[-1].startswith("/") and Path(fields[-1]).name.startswith("libnccl") and fields[-1] not in seen:
            seen.append(fields[-1])
    return [Path(s) for s in seen]


def from_process() -> list[tuple[Path, Version | None]]:
    """Import torch (CUDA torch maps libnccl.so.2 at import, GPU or not), then ncclGetVersion of each
    libnccl this process has mapped: the NCCL it really runs."""
    try:
        import torch  # noqa: F401, PLC0415 - optional and slow to import
    except Exception:  # noqa: BLE001, S110 - without torch the maps show what else loaded NCCL
        pass
    return [(path, from_library((str(path),))) for path in loaded_libraries()]


def wheel_library() -> Path | None:
    """libnccl.so.2 of the nvidia-nccl wheel (nvidia/nccl/lib), the file CUDA torch loads through its
    RPATH; the server image installs a newer one there over the base's."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if candidate.is_file():
            return candidate
    return None


def detect() -> tuple[Version | None, str]:
    """(version, where it came from): the libnccl this process has loaded (after importing torch),
    then the nvidia-nccl wheel's library, then whatever libnccl the dynamic loader finds, and only
    then what torch was compiled against."""
    for path, v in from_process():
        if v is not None:
            return v, f"{path} (loaded by this process) ncclGetVersion"
    wheel = wheel_library()
    v = from_library((str(wheel),)) if wheel else None
    if v is not None:
        return v, f"{wheel} ncclGetVersion"
    v = from_library()
    if v is not None:
        return v, "libnccl.so ncclGetVersion"
    v = from_torch()
    if v is not None:
        return v, "torch.cuda.nccl.version() (the NCCL torch was compiled against)"
    return None, "not found (no torch with NCCL, no nvidia-nccl wheel, no libnccl.so.2 on the loader path)"


def problems(v: Version) -> list[tuple[str, KnownBad]]:
    """("fail", entry) for the exact reported release, ("warn", entry) inside its unfixed range."""
    out = []
    for bad in KNOWN_BAD:
        if v == bad.reported:
            out.append(("fail", bad))
        elif bad.reported < v < bad.fixed:
            out.append(("warn", bad))
    return out


def pinned_version(spec: str | None) -> Version | None:
    """X.Y.Z of a requirement that names one version (`nvidia-nccl-cu13==2.31.2`); None otherwise."""
    if not spec or "==" not in spec:
        return None
    return parse_version(spec.split("==", 1)[1].split(";")[0].strip())


def main(argv: list[str] | None = None) -> int:
    """`python -m launcher.doctor.nccl [--require X.Y.Z] [--pinned SPEC]`: what NCCL this Python would
    run, from each source; the image build calls it to prove the NCCL it installed is the one torch
    loads. Only run-time sources are checked (the libnccl this process mapped after importing torch,
    the nvidia-nccl wheel's file, the loader's libnccl.so.2); torch.cuda.nccl.version() is printed
    but not checked: it is the version torch was compiled against."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m launcher.doctor.nccl")
    p.add_argument("--require", help="exit 1 unless every run-time source that answers reports at least this version")
    p.add_argument("--pinned", metavar="SPEC",
                   help="the wheel requirement installed (NCCL_WHEEL); when it names one version (==X.Y.Z), "
                        "exit 1 unless every run-time source that answers reports exactly that")
    args = p.parse_args(argv)
    need = parse_version(args.require) if args.require else None
    if args.require and need is None:
        print(f"--require {args.require!r}: not a version; write it as X.Y.Z", file=sys.stderr)
        return 2
    exact = pinned_version(args.pinned)
    loaded = from_process()
    wheel = wheel_library()
    found: dict[str, Version | None] = {f"libnccl loaded by this process ({path})": v for path, v in loaded}
    if not loaded:
        found["libnccl loaded by this process (none mapped)"] = None
    found[f"nvidia-nccl wheel ({wheel or 'not installed'})"] = from_library((str(wheel),)) if wheel else None
    found["libnccl.so.2 as this process resolves it"] = from_library()
    for source, v in found.items():
        print(f"{source}: {fmt(v) if v else 'no answer'}")
    built = from_torch()
    print(f"torch.cuda.nccl.version() (compiled against; not checked): {fmt(built) if built else 'no answer'}")
    if need is None and exact is None:
        return 0
    answered = [v for v in found.values() if v]
    if not answered:
        print(f"no run-time source reports an NCCL version; {args.pinned or fmt(need)} is required", file=sys.stderr)  # type: ignore[arg-type]
        return 1
    if len(loaded) > 1:
        print(f"{len(loaded)} NCCL libraries mapped in one process: {', '.join(map(str, (p for p, _ in loaded)))}", file=sys.stderr)
        return 1
    if need is not None:
        low = sorted({fmt(v) for v in answered if v < need})
        if low:
            print(f"NCCL {', '.join(low)} found where {fmt(need)} or newer is required", file=sys.stderr)
            return 1
    if exact is not None:
        other = sorted({fmt(v) for v in answered if v != exact})
        if other:
            print(f"NCCL {', '.join(other)} found where {args.pinned} was installed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
