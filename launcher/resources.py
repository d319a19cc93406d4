"""Where the kit's shipped data lives: the built-in profiles and sitecustomize.

An installed wheel carries both inside the `launcher` package (`launcher/builtin_profiles/`,
`launcher/site/`); a source checkout keeps them at the top level (`profiles/`, `sitecustomize/`).
The settings KIT_BUILTIN_PROFILES_DIR and KIT_SITECUSTOMIZE_DIR override both.
"""

from __future__ import annotations

from pathlib import Path

from launcher import settings

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[-1]


def builtin_profiles_dir() -> Path:
    return settings.KIT_BUILTIN_PROFILES_DIR.get() or _first_existing(PACKAGE / "builtin_profiles", CHECKOUT / "profiles")


def sitecustomize_dir() -> Path:
    return settings.KIT_SITECUSTOMIZE_DIR.get() or _first_existing(PACKAGE / "site", CHECKOUT / "sitecustomize")
