"""Where the installed SGLang is and which version it is, read from its metadata, never imported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from patches.errors import PatchError


def find_site_packages() -> Path:
    """The directory that holds the `sglang` package of this Python, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        raise PatchError(
            f"sglang is not installed for {sys.executable}; install it "
            "(pip install --no-deps sglang==<version>) or pass --target SITE_PACKAGES"
        )
    if spec.origin and spec.origin != "namespace":
        return Path(spec.origin).resolve().parent.parent
    return Path(next(iter(spec.submodule_search_locations or []))).resolve().parent


def installed_version(target: Path, *, editable_fallback: bool = False) -> str:
    """The sglang version from the `sglang-*.dist-info/METADATA` (or egg-info PKG-INFO) in target.

    With editable_fallback (target found from this Python, e.g. an editable install whose
    dist-info lives elsewhere), fall back to importlib.metadata.
    """
    found = []
    candidates = [d / "METADATA" for d in target.glob("sglang-*.dist-info")]
    candidates += [d / "PKG-INFO" for d in target.glob("sglang*.egg-info")]
    for meta in sorted(candidates):
        if not meta.is_file():
            continue
        fields = _metadata_fields(meta.read_text(encoding="utf-8", errors="replace"))
        if fields.get("name", "").lower().replace("_", "-") == "sglang" and "version" in fields:
            found.append((meta.parent, fields["version"]))
    if not found and editable_fallback:
        import importlib.metadata

        try:
            return importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            pass
    if not found:
        raise PatchError(
            f"no sglang-*.dist-info/METADATA in {target}; pass the site-packages directory "
            "that holds the installed sglang wheel with --target"
        )
    if len(found) > 1:
        names = ", ".join(d.name for d, _ in found)
        raise PatchError(
            f"several sglang installs in {target} ({names}); reinstall sglang so that only one remains"
        )
    return found[0][1]


def _metadata_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, sep, value = line.partition(":")
        if sep and key.lower() in ("name", "version"):
            fields.setdefault(key.lower(), value.strip())
    return fields


def check_target(target: Path) -> None:
    """Refuse a --target that is not a site-packages holding sglang, naming the likely right one."""
    if not target.is_dir():
        raise PatchError(f"--target {target} is not a directory; pass the site-packages directory")
    if not (target / "sglang").is_dir():
        hint = (
            f"; pass its parent {target.parent}"
            if target.name == "sglang"
            else "; pass the site-packages directory that holds the sglang package"
        )
        raise PatchError(f"no sglang package in {target}{hint}")
