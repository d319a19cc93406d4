"""Which SGLang patches the installed wheel carries (written by patches/apply.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

RECORD_NAME = "kit_patches.json"


def record_path() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / RECORD_NAME


def installed() -> dict[str, str]:
    """Patch name -> sha256 of the patch file; empty when sglang is absent or unpatched."""
    path = record_path()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    patches = data.get("patches") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in patches.items()} if isinstance(patches, dict) else {}


def missing(needed: list[str]) -> list[str]:
    have = installed()
    return [p for p in needed if p not in have]
