"""Which profiles, spec modes and model overlays exist, and where: file discovery only, standard library only.

The one source of truth for names. The loader resolves names through these functions, and the
Makefile asks this module (`python3 -m launcher.profiles.catalog profiles`) before any docker command
runs, on a GPU host that may have no kit virtualenv. So nothing imported here may need a third-party
package (tests/launcher/profiles/test_catalog.py runs it with every non-stdlib import refused).

Folders: each KIT_PROFILES_DIR folder (colon-separated, in order), then the built-in profiles. A
profile is `<folder>/<name>.toml`, a spec mode `<folder>/spec/<mode>.toml`, a model overlay (the flags
one model needs whatever the profile: its parsers) `<folder>/model/<name>.toml`; the first folder that
has a name wins, so a user's file shadows a built-in one. `base` is the implicit root, not a profile.

`compose-override` writes the compose file that mounts those folders into the containers: compose
cannot split a colon-separated variable into volumes, so `make` lays this file over docker-compose.yml.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from launcher import settings
from launcher.errors import UserError, run_cli
from launcher.profiles import policy
from launcher.resources import builtin_profiles_dir

BASE_NAME = "base"
SPEC_DIR = "spec"
MODEL_DIR = "model"
_KINDS = {"": "profile", SPEC_DIR: "spec", MODEL_DIR: "model overlay"}  # subfolder -> what its files are
SERVICES = ("server", "bench")  # the containers that read profiles
_NAME = re.compile(policy.NAME_PATTERN)


def check_name(kind: str, name: object) -> str:
    """A profile, spec or model overlay name, or UserError: names are file names, never paths."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise UserError(
            f"{kind} name {shown} is not valid: use 1-64 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (a name, not a path)"
        )
    return name


def user_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The KIT_PROFILES_DIR folders, in order."""
    return list(settings.KIT_PROFILES_DIR.get(environ) or [])


def search_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """User folders from KIT_PROFILES_DIR (colon-separated) come first, so they can shadow built-ins."""
    return [*user_dirs(environ), builtin_profiles_dir()]


def _regular_inside(path: Path, folder: Path) -> bool:
    """A regular file (after links) whose real path is inside the folder's; dangling links, loops,
    FIFOs and names too long for the file system are not profiles."""
    try:
        return path.is_file() and path.resolve(strict=True).is_relative_to(folder.resolve(strict=True))
    except (OSError, RuntimeError):
        return False


def _names_in(folder: Path) -> set[str]:
    try:
        candidates = list(folder.glob("*.toml")) if folder.is_dir() else []
    except OSError:
        return set()
    return {p.stem for p in candidates if _NAME.fullmatch(p.stem) and _regular_inside(p, folder)}


def find_file(name: str, sub: str = "") -> Path | None:
    """The file of profile `name` (of spec mode `name` with sub="spec", of model overlay `name` with
    sub="model"): the first folder wins."""
    check_name(_KINDS[sub], name)
    for d in search_dirs():
        folder = d / sub if sub else d
        p = folder / f"{name}.toml"
        if _regular_inside(p, folder):
            return p
    return None


def available_names() -> list[str]:
    """Every profile name in the search folders, sorted."""
    names: set[str] = set()
    for d in search_dirs():
        names |= _names_in(d)
    names.discard(BASE_NAME)
    return sorted(names)


def misnamed_files() -> list[Path]:
    """The .toml files of the profile folders (regular, inside their folder) whose name is no profile name
    (`Ünï.toml`, `My Profile.toml`): never a profile, but listed as invalid so that a user learns why."""
    out: list[Path] = []
    for d in search_dirs():
        try:
            candidates = sorted(d.glob("*.toml")) if d.is_dir() else []
        except OSError:
            continue
        out.extend(p for p in candidates if not _NAME.fullmatch(p.stem) and _regular_inside(p, d))
    return out


def spec_modes() -> list[str]:
    """Every spec mode in the search folders' spec/ subfolders, sorted."""
    names: set[str] = set()
    for d in search_dirs():
        names |= _names_in(d / SPEC_DIR)
    return sorted(names)


def model_overlays() -> list[str]:
    """Every model overlay in the search folders' model/ subfolders, sorted."""
    names: set[str] = set()
    for d in search_dirs():
        names |= _names_in(d / MODEL_DIR)
    return sorted(names)


def compose_override(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> dict:
    """Compose services that mount each KIT_PROFILES_DIR folder read-only at its own absolute path and
    pass the folders on, so a path reads the same in the container, in /status and on the host."""
    base = cwd or Path.cwd()
    folders: list[str] = []
    for d in user_dirs(environ):
        folder = d if d.is_absolute() else base / d
        if not folder.is_dir():
            raise UserError(
                f"KIT_PROFILES_DIR: {folder} is not a folder on this host; create it or remove it from "
                "KIT_PROFILES_DIR (in .env or on the command line)"
            )
        shown = os.path.normpath(folder)
        if shown not in folders:
            folders.append(shown)
    # Compose interpolates '$' in every file it reads; '$$' is a literal one.
    esc = [f.replace("$", "$$") for f in folders]
    service = {
        "environment": {settings.KIT_PROFILES_DIR.name: ":".join(esc)},
        "volumes": [{"type": "bind", "source": f, "target": f, "read_only": True} for f in esc],
    }
    return {"services": {name: service for name in SERVICES}}


def _write_override(out: str) -> None:
    text = (
        "# Written by `make` (python3 -m launcher.profiles.catalog compose-override) from KIT_PROFILES_DIR;\n"
        "# laid over docker-compose.yml by every compose verb. Do not edit: the next make verb rewrites it.\n"
        + json.dumps(compose_override(), indent=2)
        + "\n"
    )
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    """`profiles`, `specs`, `model-overlays`, `default-spec`: one line of names for the Makefile;
    `compose-override`."""
    p = argparse.ArgumentParser(prog="python3 -m launcher.profiles.catalog", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("profiles", help="the known profile names, on one line")
    sub.add_parser("specs", help="the known spec modes, on one line")
    sub.add_parser("model-overlays", help="the known model overlays, on one line")
    sub.add_parser("default-spec", help="the spec mode used when none is named (SPEC, else the default)")
    s = sub.add_parser("compose-override", help="the compose file that mounts the KIT_PROFILES_DIR folders")
    s.add_argument("--out", help="write it here (default: print it)")
    args = p.parse_args(argv)

    def body() -> None:
        if args.cmd == "profiles":
            print(" ".join(available_names()))
        elif args.cmd == "specs":
            print(" ".join(spec_modes()))
        elif args.cmd == "model-overlays":
            print(" ".join(model_overlays()))
        elif args.cmd == "default-spec":
            print(settings.default_spec())
        elif args.out:
            _write_override(args.out)
        else:
            print(json.dumps(compose_override(), indent=2))

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
