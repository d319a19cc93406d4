"""Whether two bundles are comparable: their fingerprints (GPU names, driver, SGLang version, simulated or
not, and the setup of every cell), what differs between them, and the host-local values that differ.

A cell's setup compares by its setup digest (env, flags, patches and the models' identity, without the model
paths, host and port), or by its plan digest for a bundle written before setup digests existed. Host-local
values (model path, host, port) are information only: `bench compare` (bench/report/compare.py) lists them
and never refuses on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.bundle.schema import Cell, Manifest


@dataclass(frozen=True)
class Setup:
    """What a cell ran, as `bench compare` matches it: digests, and the host-local values shown only."""

    setup_digest: str | None
    plan_digest: str | None
    local: dict[str, str]


@dataclass(frozen=True)
class Fingerprint:
    """What must agree for two bundles to be comparable; `setups` by cell key."""

    gpu_names: list[str] | str
    driver: str | None
    sglang_version: str | None
    simulated: bool
    setups: dict[str, Setup]

    LABELS: ClassVar[dict[str, str]] = {"gpu_names": "GPU names", "driver": "driver",
                                        "sglang_version": "sglang version", "simulated": "simulated"}


def _setup(cell: Cell) -> Setup:
    return Setup(setup_digest=cell.setup_digest, plan_digest=cell.plan_digest, local=cell.local or {})


def fingerprint(manifest: Manifest, cells: list[Cell]) -> Fingerprint:
    host = manifest.host
    return Fingerprint(
        gpu_names=sorted(g.name for g in host.gpus) if host.available else "unavailable",
        driver=host.driver,
        sglang_version=manifest.server.sglang_version,
        simulated=bool(manifest.simulated),
        setups={c.key: _setup(c) for c in cells},
    )


def differences(fa: Fingerprint, fb: Fingerprint) -> list[str]:
    """Human-readable fingerprint differences (setups only for cells both bundles have).

    Setups compare by setup digest when both cells carry one, else by plan digest (older bundles)."""
    out = []
    for attr, label in Fingerprint.LABELS.items():
        if getattr(fa, attr) != getattr(fb, attr):
            out.append(f"{label}: A={getattr(fa, attr)} B={getattr(fb, attr)}")
    sa, sb = fa.setups, fb.setups
    for cell in sorted(set(sa) & set(sb)):
        a, b = sa[cell], sb[cell]
        key = "setup_digest" if a.setup_digest and b.setup_digest else "plan_digest"
        if getattr(a, key) != getattr(b, key):
            out.append(f"{key.replace('_', ' ')} of {cell}: A={getattr(a, key)} B={getattr(b, key)}")
    return out


def local_differences(fa: Fingerprint, fb: Fingerprint) -> list[str]:
    """Host-local values (model path, host, port) that differ between the cells both bundles have."""
    out = []
    sa, sb = fa.setups, fb.setups
    for cell in sorted(set(sa) & set(sb)):
        la, lb = sa[cell].local, sb[cell].local
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                out.append(f"{key} of {cell}: A={la.get(key)} B={lb.get(key)}")
    return out


def local_summary(fa: Fingerprint, fb: Fingerprint) -> str:
    """The host-local differences in one line, each value pair once with the cells it holds for ("every cell"
    when all that both bundles have): two `make demo` runs differ in the port of every cell, which is one fact."""
    common = sorted(set(fa.setups) & set(fb.setups))
    groups: dict[tuple[str, str, str], list[str]] = {}
    for cell in common:
        la, lb = fa.setups[cell].local, fb.setups[cell].local
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                groups.setdefault((key, str(la.get(key)), str(lb.get(key))), []).append(cell)
    return "; ".join(f"{key} A={a} B={b} ({'every cell' if len(cells) == len(common) else ', '.join(cells)})"
                     for (key, a, b), cells in groups.items())
