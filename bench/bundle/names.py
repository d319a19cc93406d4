"""Names in a results bundle: the run id, a cell's name, label and files, and the check that a path stays inside.

A cell is named `<profile>__<spec>`, or `<profile>__<spec>__<S>-<K>-<D>` at an EAGLE-3 point
(`bench run --eagle3 S,K,D`); that name is its key in the manifest and the stem of its files,
`<name>.json` (the record), `<name>.requests.jsonl` (one line per measured request) and
`<name>.logprobs.jsonl` (the correctness pass: one line per prompt, with its log-probabilities).
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from launcher.errors import RuntimeFailure
from launcher.profiles import policy
from launcher.profiles.spec_params import SpecParams

MANIFEST = "manifest.json"
SUFFIX = ".json"
REQUESTS_SUFFIX = ".requests.jsonl"
LOGPROBS_SUFFIX = ".logprobs.jsonl"  # the correctness pass: one greedy reply per prompt with its log-probabilities

Point = SpecParams | None  # an EAGLE-3 point (three whole numbers >= 1 by its type), or none

_NAME = re.compile(policy.NAME_PATTERN)


def make_run_id(now: float | None = None) -> str:
    """UTC timestamp plus a short random suffix, so two runs in the same second never collide."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def cell_name(profile: str, spec: str, spec_params: Point = None) -> str:
    """`fused__eagle3`, or `fused__eagle3__1-1-2` for a cell at an EAGLE-3 point: a file name and a key."""
    return f"{profile}__{spec}" + (f"__{spec_params.tag()}" if spec_params else "")


def point_text(spec_params: Point) -> str:
    """`(1,1,2)` for a point, "" for none: what follows the spec name in a label."""
    return spec_params.label() if spec_params else ""


def cell_label(profile: str, spec: str, spec_params: Point = None) -> str:
    """`fused+eagle3`, or `fused+eagle3(1,1,2)`: how summaries and messages name a cell."""
    return f"{profile}+{spec}{point_text(spec_params)}"


def inside(run_dir: Path, name: str) -> Path:
    """`run_dir / name`, checked before anything is written: the name is one file name and the path
    resolves (links followed) to a file directly in the bundle's folder; RuntimeFailure otherwise."""
    path = Path(run_dir) / name
    if "/" in name or "\0" in name or name in ("", ".", "..") or path.resolve().parent != Path(run_dir).resolve():
        raise RuntimeFailure(f"{path}: outside the bundle folder {run_dir}; nothing written there")
    return path


def cell_file(run_dir: Path, profile: str, spec: str, suffix: str, spec_params: Point = None) -> Path:
    """The file of one (profile, spec[, point]): both names follow the profile name rule, the point is
    whole numbers, the path stays inside."""
    for kind, name in (("profile", profile), ("spec", spec)):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise RuntimeFailure(f"{kind} name {str(name)[:80]!r} cannot name a file in the bundle {run_dir}")
    return inside(run_dir, f"{cell_name(profile, spec, spec_params)}{suffix}")


def requests_file(profile: str, spec: str, spec_params: Point = None) -> str:
    """The name of a cell's request rows file, as its record names it."""
    return f"{cell_name(profile, spec, spec_params)}{REQUESTS_SUFFIX}"


class CellNames:
    """A cell's names, from its `profile`, `spec` and `spec_params`: for the record (bundle_schema.Cell) and
    for the cell while it is measured (bench/run/cell.py CellDraft) alike."""

    profile: str
    spec: str
    spec_params: Point

    @property
    def key(self) -> str:
        """The cell's identity in a bundle, its file name: `fused__eagle3__1-1-2`."""
        return cell_name(self.profile, self.spec, self.spec_params)

    @property
    def label(self) -> str:
        """How summaries and messages name it: `fused+eagle3(1,1,2)`."""
        return cell_label(self.profile, self.spec, self.spec_params)
