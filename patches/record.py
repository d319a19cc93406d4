"""The record of applied patches, <site-packages>/sglang/kit_patches.json: read, written atomically, expected."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patches.errors import PatchError
from patches.series import PatchSet
from patches.sglang_install import find_site_packages

RECORD_NAME = "kit_patches.json"


@dataclass(frozen=True)
class PatchRecord:
    """What `<site-packages>/sglang/kit_patches.json` says is applied (name -> patch sha256)."""

    sglang_version: str
    patches: dict[str, str]

    def to_json(self) -> dict:
        return {"sglang_version": self.sglang_version, "patches": dict(self.patches)}


def record_path(target: Path) -> Path:
    """Inside the sglang package it describes, where the launcher reads it (launcher/runtime/records/patch_record.py)."""
    return target / "sglang" / RECORD_NAME


def read_record(target: str | os.PathLike[str] | None = None) -> PatchRecord | None:
    """The record apply.py wrote in target (default: this Python's site-packages), or None
    when there is none (or no sglang at all). Raises ValueError for a malformed record.
    """
    if target is None:
        try:
            target = find_site_packages()
        except PatchError:
            return None
    path = record_path(Path(target))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable patch record: {exc}") from None
    patches = data.get("patches") if isinstance(data, dict) else None
    version = data.get("sglang_version") if isinstance(data, dict) else None
    if (
        not isinstance(version, str)
        or not isinstance(patches, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in patches.items())
    ):
        raise ValueError(
            f"{path}: expected {{'sglang_version': str, 'patches': {{name: sha256}}}}; "
            "run patches/apply.py again to rewrite it"
        )
    return PatchRecord(sglang_version=version, patches=dict(patches))


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace path by rename, so a reader (or an interrupted build) never sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def expected_record(patch_set: PatchSet) -> PatchRecord:
    """The record a fully applied patch set leaves: each patch's name and the sha256 of its file."""
    return PatchRecord(
        sglang_version=patch_set.sglang_version, patches={p.name: p.sha256 for p in patch_set.patches}
    )
