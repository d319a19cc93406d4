"""Which SGLang patches the installed wheel carries: the record patches/apply.py writes.

patches/apply.py (stdlib only, run in the image before the kit is installed) writes and checks the
record; this is the launcher's reader. Both accept exactly one shape, and a test feeds both the
same damaged records: a record that is unreadable or of another shape is an error here too, never
"no patches".
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from launcher.errors import RuntimeFailure
from launcher.settings import PATCH_RECORD_FILE


def record_path() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / PATCH_RECORD_FILE


def parse(path: Path, text: str) -> dict[str, str]:
    """Patch name -> sha256 from the record's text; RuntimeFailure naming the file when malformed."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RuntimeFailure(f"{path}: not a readable patch record: {exc}; rebuild the server image (`make build`)") from None
    patches = data.get("patches") if isinstance(data, dict) else None
    version = data.get("sglang_version") if isinstance(data, dict) else None
    if (
        not isinstance(version, str)
        or not isinstance(patches, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in patches.items())
    ):
        raise RuntimeFailure(
            f"{path}: expected {{'sglang_version': str, 'patches': {{name: sha256}}}}; "
            "rebuild the server image (`make build`) so patches/apply.py rewrites it"
        )
    return dict(patches)


def installed() -> dict[str, str]:
    """Patch name -> sha256; empty when sglang is absent or was never patched (no record)."""
    path = record_path()
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeFailure(f"{path}: not a readable patch record: {exc}") from None
    return parse(path, text)


def missing(needed: list[str]) -> list[str]:
    if not needed:
        return []
    have = installed()
    return [p for p in needed if p not in have]
