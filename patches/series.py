"""A patch set: patches/<version>/series.toml, its patches, the files they touch, their post-conditions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = None  # type: ignore[assignment]

from patches.errors import PatchError

PATCHES_DIR = Path(__file__).resolve().parent
MANIFEST_NAME = "series.toml"


@dataclass(frozen=True)
class PostCondition:
    """An AST fact that must hold in a patched file (see series.toml for the keys)."""

    file: str
    function: str | None
    uses: tuple[str, ...]
    or_group: tuple[str, ...]
    assigns: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    summary: str
    files: tuple[str, ...]
    post: tuple[PostCondition, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class PatchSet:
    sglang_version: str
    directory: Path
    patches: tuple[Patch, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """Every file any patch touches, in first-seen order."""
        return tuple(dict.fromkeys(f for p in self.patches for f in p.files))


def available_versions() -> list[str]:
    """Versions that have a patch set under patches/."""
    return sorted((p.parent.name for p in PATCHES_DIR.glob(f"*/{MANIFEST_NAME}")), key=_version_key)


def _version_key(version: str) -> tuple:
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in version.split("."))


def load_patch_set(version: str) -> PatchSet:
    """Read patches/<version>/series.toml; fails when the kit has no patches for that version."""
    directory = PATCHES_DIR / version
    manifest = directory / MANIFEST_NAME
    if not manifest.is_file():
        known = available_versions()
        raise PatchError(
            f"sglang {version} is installed, but the kit has patches only for sglang "
            f"{', '.join(known) or '(none)'} (under {PATCHES_DIR}); install the pinned version "
            f"(pip install --force-reinstall --no-deps sglang=={known[-1] if known else '<version>'}) "
            f"or add a patch set in {directory}/ (see docs/patches.md)"
        )
    if tomllib is None:
        raise PatchError("Python 3.11 or newer is needed to read series.toml", exit_code=1)
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PatchError(f"{manifest}: cannot read it: {exc}") from None
    _require_keys(manifest, "top level", data, {"sglang_version", "patch"}, {"sglang_version"})
    if data["sglang_version"] != version:
        raise PatchError(
            f"{manifest}: sglang_version is {data['sglang_version']!r} but the folder is {version!r}; "
            "make them equal"
        )
    patches = []
    for i, entry in enumerate(data.get("patch", [])):
        where = f"[[patch]] #{i + 1}"
        _require_keys(manifest, where, entry, {"name", "file", "summary", "post"}, {"name", "file"})
        path = directory / entry["file"]
        if not path.is_file():
            raise PatchError(f"{manifest}: {where} file {entry['file']!r} does not exist in {directory}")
        post = []
        for j, cond in enumerate(entry.get("post", [])):
            cwhere = f"{where} post #{j + 1}"
            _require_keys(
                manifest, cwhere, cond, {"file", "function", "uses", "or_group", "assigns", "why"}, {"file"}
            )
            post.append(
                PostCondition(
                    file=cond["file"],
                    function=cond.get("function"),
                    uses=tuple(cond.get("uses", ())),
                    or_group=tuple(cond.get("or_group", ())),
                    assigns=tuple(cond.get("assigns", ())),
                    why=cond.get("why", ""),
                )
            )
        patches.append(
            Patch(
                name=entry["name"],
                path=path,
                summary=entry.get("summary", ""),
                files=touched_files(path),
                post=tuple(post),
            )
        )
    names = [p.name for p in patches]
    if len(set(names)) != len(names):
        raise PatchError(f"{manifest}: patch names must be unique, got {names}")
    return PatchSet(sglang_version=version, directory=directory, patches=tuple(patches))


def _require_keys(manifest: Path, where: str, table: dict, allowed: set[str], required: set[str]) -> None:
    unknown = set(table) - allowed
    missing = required - set(table)
    if unknown or missing:
        raise PatchError(
            f"{manifest}: {where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}; "
            f"allowed keys are {sorted(allowed)}"
        )


def touched_files(patch_path: Path) -> tuple[str, ...]:
    """Paths (relative to site-packages, -p1) that a unified diff modifies."""
    files = []
    for line in patch_path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("+++ "):
            continue
        name = line[4:].split("\t", 1)[0].strip()
        parts = Path(name).parts[1:]
        if not parts or Path(name).is_absolute() or ".." in parts:
            raise PatchError(f"{patch_path}: unsupported target path {name!r} (want b/sglang/...)")
        files.append(Path(*parts).as_posix())
    if not files:
        raise PatchError(f"{patch_path}: no '+++ b/...' header; write it with diff -u")
    return tuple(dict.fromkeys(files))
