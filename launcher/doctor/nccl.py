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
    fixed: Version  # first release with the fix
    ref: str
    what: str


# docs/evidence.md, "NCCL on 8× PCIe". Releases after `reported` and before `fixed` were never reported on
# but carry the same code, so they get a warning; the reported release itself fails.
KNOWN_BAD = (
    KnownBad((2, 26, 2), (2, 31, 2), "nccl#2418", "illegal memory access in all-reduces of 512 KiB or more (2x RTX PRO 6000)"),
    KnownBad((2, 28, 9), (2, 30, 4), "vllm#52504", "deadlock on CUDA-graph replay (reported cross-node)"),
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
    """torch.cuda.nccl.version(); None when torch is missing or built without NCCL (CPU wheels)."""
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


def wheel_library() -> Path | None:
    """libnccl.so.2 of the nvidia-nccl wheel (nvidia/nccl/lib), the file CUDA torch loads through its
    RPATH; the server image installs a newer one there over the base's."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if candidate.is_file():
            return candidate
    return None


def detect() -> tuple[Version | None, str]:
    """(version, where it came from): torch first, then the nvidia-nccl wheel's library, then
    whatever libnccl the dynamic loader finds."""
    v = from_torch()
    if v is not None:
        return v, "torch.cuda.nccl.version()"
    wheel = wheel_library()
    v = from_library((str(wheel),)) if wheel else None
    if v is not None:
        return v, f"{wheel} ncclGetVersion"
    v = from_library()
    if v is not None:
        return v, "libnccl.so ncclGetVersion"
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


def main(argv: list[str] | None = None) -> int:
    """`python -m launcher.doctor.nccl [--require X.Y.Z]`: what NCCL this Python would run, from each
    source; the image build calls it to prove the NCCL it installed is the one torch loads."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m launcher.doctor.nccl")
    p.add_argument("--require", help="exit 1 unless every source that answers reports at least this version")
    args = p.parse_args(argv)
    need = parse_version(args.require) if args.require else None
    if args.require and need is None:
        print(f"--require {args.require!r}: not a version; write it as X.Y.Z", file=sys.stderr)
        return 2
    wheel = wheel_library()
    found = {
        "torch.cuda.nccl.version()": from_torch(),
        f"nvidia-nccl wheel ({wheel or 'not installed'})": from_library((str(wheel),)) if wheel else None,
        "libnccl.so.2 as this process resolves it": from_library(),
    }
    for source, v in found.items():
        print(f"{source}: {fmt(v) if v else 'no answer'}")
    answered = [v for v in found.values() if v]
    if need is None:
        return 0
    if not answered:
        print(f"no source reports an NCCL version; {fmt(need)} or newer is required", file=sys.stderr)
        return 1
    low = sorted({fmt(v) for v in answered if v < need})
    if low:
        print(f"NCCL {', '.join(low)} found where {fmt(need)} or newer is required", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
