"""Which SGLang patches the installed wheel carries: the record patches/apply.py writes.

patches/apply.py (stdlib only, run in the image before the kit is installed) writes and checks the
record; this is the launcher's reader. Both accept exactly one shape, and a test feeds both the
same damaged records: a record that is unreadable or of another shape is an error here too, never
"no patches".
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from launcher.errors import RuntimeFailure

PATCH_RECORD_FILE = "kit_patches.json"  # in the installed sglang package, written by patches/apply.py
RECORD_CAP = 1 << 20  # a version and one sha256 per patch: KiBs


def record_path() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / PATCH_RECORD_FILE


class Record(BaseModel):
    """The one shape apply.py writes: {"sglang_version": str, "patches": {name: sha256}}."""

    model_config = ConfigDict(strict=True)
    sglang_version: str
    patches: dict[str, str]


def parse(path: Path, text: str) -> dict[str, str]:
    """Patch name -> sha256 from the record's text; RuntimeFailure naming the file when malformed."""
    try:
        return Record.model_validate_json(text).patches
    except ValidationError as exc:
        raise RuntimeFailure(
            f"{path}: not a patch record of the shape {{'sglang_version': str, 'patches': {{name: sha256}}}} "
            f"({exc.errors()[0]['msg']}); rebuild the server image (`make build`) so patches/apply.py rewrites it"
        ) from None


def installed() -> dict[str, str]:
    """Patch name -> sha256; empty when sglang is absent or was never patched (no record)."""
    path = record_path()
    if path is None:
        return {}
    # the one reader of a kit record: a regular file of bounded size
    from launcher.runtime.records import state as runtime_state

    try:
        data = runtime_state.read_bytes(path, RECORD_CAP)
        if data is None:
            return {}
        text = data.decode("utf-8")
    except (runtime_state.Damaged, UnicodeDecodeError) as exc:
        why = exc.why if isinstance(exc, runtime_state.Damaged) else "not UTF-8"
        raise RuntimeFailure(f"{path}: not a readable patch record: {why}") from None
    return parse(path, text)


def missing(needed: list[str]) -> list[str]:
    if not needed:
        return []
    have = installed()
    return [p for p in needed if p not in have]
