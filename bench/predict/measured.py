"""Measured inputs for the cost model: all-reduce latency from `bench allreduce`, results from `bench run`.

All-reduce latency at the verify message size (tokens x hidden x element size) is read from the p50
column, per backend/profile/rank-count/graph group, interpolated linearly in log(size)-log(time)
between the two nearest measured sizes; outside the measured range the nearest size is used and the
result says so.

A bench bundle is a directory of `<profile>__<spec>.json` files with at least `profile`, `spec`,
`valid`, `output_throughput` (tok/s), `accept_length` and `median_itl_ms`; `baseline__off.json`
gives the baseline throughput.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserError

ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
BUNDLE_KEYS = ("profile", "spec", "valid", "output_throughput", "accept_length", "median_itl_ms")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{path}: {what} not found") from exc
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); regenerate it") from exc


@dataclass(frozen=True)
class AllreduceCurve:
    backend: str
    profile: str | None
    nranks: int
    graph: bool
    dtype: str
    points: tuple[tuple[int, float], ...]  # (size_B, time_us), sorted by size

    @property
    def label(self) -> str:
        return (
            f"{self.backend}"
            + (f" [{self.profile}]" if self.profile else "")
            + f", {self.nranks} rank{'s' if self.nranks > 1 else ''}"
            + (", graph" if self.graph else "")
        )

    def at(self, size: int) -> tuple[float, str]:
        """(p50 us at `size`, how it was obtained)."""
        pts = self.points
        for s, t in pts:
            if s == size:
                return t, "measured"
        if size < pts[0][0]:
            return pts[0][1], f"below the smallest measured size ({pts[0][0]} B): used that size"
        if size > pts[-1][0]:
            return pts[-1][1], f"above the largest measured size ({pts[-1][0]} B): used that size"
        for (s0, t0), (s1, t1) in zip(pts, pts[1:], strict=False):
            if s0 < size < s1:
                frac = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
                return math.exp(
                    math.log(t0) + frac * (math.log(t1) - math.log(t0))
                ), f"interpolated {s0}..{s1} B"
        raise AssertionError("unreachable")


def load_allreduce_curves(path: Path) -> list[AllreduceCurve]:
    rows = _read_json(path, "all-reduce results (from `bench allreduce --out DIR`: DIR/allreduce.json)")
    if not isinstance(rows, list):
        raise UserError(f"{path}: expected a list of rows as written by `bench allreduce`")
    groups: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{path}: row {i} is not an object")
        if row.get("status", "ok") != "ok":
            continue
        try:
            key = (
                row["backend"],
                row.get("profile"),
                int(row["nranks"]),
                bool(row.get("graph")),
                row["type"],
            )
            # time_us (nccl-tests' definition); files from before it existed carry only the p50
            point = (int(row["size_B"]), float(row["time_us"] if "time_us" in row else row["time_us_p50"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(
                f"{path}: row {i}: missing or bad key {exc}; regenerate with `bench allreduce`"
            ) from exc
        if point[1] > 0:
            groups.setdefault(key, []).append(point)
    if not groups:
        raise UserError(f"{path}: no measured rows (all skipped or failed)")
    return [
        AllreduceCurve(
            backend=k[0], profile=k[1], nranks=k[2], graph=k[3], dtype=k[4], points=tuple(sorted(v))
        )
        for k, v in groups.items()
    ]


@dataclass(frozen=True)
class BundleEntry:
    file: str
    profile: str
    spec: str
    valid: bool
    output_throughput: float | None
    accept_length: float | None
    median_itl_ms: float | None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def load_bundle(directory: Path) -> tuple[list[BundleEntry], float | None]:
    """(speculative entries, baseline tok/s or None) from a bench bundle directory."""
    if not directory.is_dir():
        raise UserError(f"{directory}: bench bundle directory not found (the --out of `bench run`)")
    entries: list[BundleEntry] = []
    baseline: float | None = None
    files = sorted(p for p in directory.glob("*__*.json") if p.is_file())
    if not files:
        raise UserError(
            f"{directory}: no <profile>__<spec>.json files; is this a `bench run` output directory?"
        )
    for path in files:
        data = _read_json(path, "bundle file")
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a JSON object")
        missing = [k for k in BUNDLE_KEYS if k not in data]
        if missing:
            raise UserError(f"{path}: missing key(s) {', '.join(missing)}; regenerate it with `bench run`")
        try:
            entry = BundleEntry(
                file=path.name,
                profile=str(data["profile"]),
                spec=str(data["spec"]),
                valid=bool(data["valid"]),
                output_throughput=_opt_float(data["output_throughput"]),
                accept_length=_opt_float(data["accept_length"]),
                median_itl_ms=_opt_float(data["median_itl_ms"]),
            )
        except (TypeError, ValueError) as exc:
            raise UserError(
                f"{path}: a number is not numeric ({exc}); regenerate it with `bench run`"
            ) from exc
        if path.name == "baseline__off.json":
            if entry.valid and entry.output_throughput:
                baseline = entry.output_throughput
            continue
        if entry.spec != "off":
            entries.append(entry)
    return entries, baseline
