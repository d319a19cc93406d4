#!/usr/bin/env python3
"""Apply the kit's patches to an installed SGLang, verify them, and record what is applied.

    python patches/apply.py [--target SITE_PACKAGES] [--check]

Stdlib only, and it never imports sglang or the kit: the Docker build runs it before the
kit is installed. The patch set is chosen by the installed sglang version
(patches/<version>/series.toml). Every patch is first tried on a scratch copy of the
files it touches, so a patch that does not apply, or a failed post-condition, leaves
the target unchanged.

Exit codes: 0 = applied or already applied (with --check: all applied and recorded);
1 = --check found patches or the record missing, a post-condition failed, or the
system `patch` program is missing; 2 = no sglang, wrong sglang version, or a patch
that does not apply (nothing changed).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = None  # type: ignore[assignment]

PATCHES_DIR = Path(__file__).resolve().parent
MANIFEST_NAME = "series.toml"
RECORD_NAME = "kit_patches.json"
_PATCH_FLAGS = ["-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "--reject-file=-"]


class PatchError(Exception):
    """A failure with a message that tells the user what to do, and an exit code."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


@dataclass(frozen=True)
class PatchRecord:
    """What `<site-packages>/sglang/kit_patches.json` says is applied (name -> patch sha256)."""

    sglang_version: str
    patches: dict[str, str]

    def to_json(self) -> dict:
        return {"sglang_version": self.sglang_version, "patches": dict(self.patches)}


# --- locating sglang ------------------------------------------------------------------


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


def _check_target(target: Path) -> None:
    if not target.is_dir():
        raise PatchError(f"--target {target} is not a directory; pass the site-packages directory")
    if not (target / "sglang").is_dir():
        hint = (
            f"; pass its parent {target.parent}"
            if target.name == "sglang"
            else "; pass the site-packages directory that holds the sglang package"
        )
        raise PatchError(f"no sglang package in {target}{hint}")


# --- the patch set --------------------------------------------------------------------


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


# --- running GNU patch ----------------------------------------------------------------


def _run_patch(
    workdir: Path, patch: Patch, *, reverse: bool = False, dry_run: bool = False
) -> tuple[bool, str]:
    cmd = ["patch", *_PATCH_FLAGS, "-d", str(workdir), "-i", str(patch.path)]
    cmd.append("-R" if reverse else "--forward")
    if dry_run:
        cmd.append("--dry-run")
    env = {**os.environ, "LC_ALL": "C"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        raise PatchError(
            "the GNU `patch` program is not installed; install it (apt-get install patch)", exit_code=1
        ) from None
    return proc.returncode == 0, proc.stdout + proc.stderr


def _failure_details(output: str) -> str:
    """Turn GNU patch's report into 'file: hunk #N failed at line L' items."""
    details, current = [], "?"
    for line in output.splitlines():
        for prefix in ("checking file ", "patching file "):
            if line.startswith(prefix):
                current = line[len(prefix) :].strip()
        if line.startswith("Hunk #") and "FAILED" in line:
            number = line.split()[1].lstrip("#")
            at = line.split(" at ", 1)[1].rstrip(".") if " at " in line else "?"
            details.append(f"{current}: hunk #{number} failed at line {at}")
        elif line.startswith("Reversed (or previously applied) patch detected"):
            details.append(f"{current}: already patched while other files are not")
        elif "can't find file to patch" in line or "No such file" in line:
            details.append(f"{current}: file missing")
    return "; ".join(dict.fromkeys(details)) or output.strip().replace("\n", " | ")


# --- post-conditions ------------------------------------------------------------------


def _identifier(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _check_condition(root: Path, cond: PostCondition) -> str | None:
    """None when the condition holds, else why not."""
    path = root / cond.file
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError) as exc:
        return f"{cond.file}: cannot parse: {exc}"
    scopes: list[ast.AST]
    where = cond.file
    if cond.function:
        scopes = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == cond.function
        ]
        where = f"{cond.file}:{cond.function}()"
        if not scopes:
            return f"{where}: function not found"
    else:
        scopes = [tree]
    for scope in scopes:
        names = {i for n in ast.walk(scope) if (i := _identifier(n))}
        if not set(cond.uses) <= names:
            continue
        if cond.or_group and not any(
            isinstance(n, ast.BoolOp)
            and isinstance(n.op, ast.Or)
            and set(cond.or_group) <= {_identifier(v) for v in n.values}
            for n in ast.walk(scope)
        ):
            continue
        assigned = {
            t.id
            for n in getattr(scope, "body", [])
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        if set(cond.assigns) <= assigned:
            return None
    wanted = []
    if cond.uses:
        wanted.append(f"uses {list(cond.uses)}")
    if cond.or_group:
        wanted.append(f"`or` of {list(cond.or_group)}")
    if cond.assigns:
        wanted.append(f"assigns {list(cond.assigns)}")
    return f"{where}: expected {' and '.join(wanted)} ({cond.why})"


def check_post_conditions(root: Path, patch_set: PatchSet) -> list[str]:
    """Failed post-conditions of every patch, checked on the source under root."""
    return [
        f"{p.name}: {msg}" for p in patch_set.patches for c in p.post if (msg := _check_condition(root, c))
    ]


# --- the record -----------------------------------------------------------------------


def record_path(target: Path) -> Path:
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


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
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


def _expected_record(patch_set: PatchSet) -> PatchRecord:
    return PatchRecord(
        sglang_version=patch_set.sglang_version, patches={p.name: p.sha256 for p in patch_set.patches}
    )


# --- apply / check --------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    statuses: dict[str, str]  # patch name -> "applied" | "already applied" | "not applied"
    changed_files: tuple[str, ...]
    record_written: bool


def apply_patch_set(target: Path, patch_set: PatchSet, *, check: bool = False) -> Outcome:
    """Bring target to the fully patched state (or, with check, only report how far it is).

    The whole series is applied to a scratch copy first; the target is touched only
    when every patch applies and every post-condition holds.
    """
    statuses: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kit-patches-") as scratch_dir:
        scratch = Path(scratch_dir)
        for rel in patch_set.files:
            src = target / rel
            if not src.is_file():
                raise PatchError(
                    f"{src} is missing; the sglang in {target} is not a complete "
                    f"{patch_set.sglang_version} install (pip install --force-reinstall --no-deps "
                    f"sglang=={patch_set.sglang_version})"
                )
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, scratch / rel)

        for patch in patch_set.patches:
            ok, output = _run_patch(scratch, patch, dry_run=True)
            if ok:
                ok, output = _run_patch(scratch, patch)
                if not ok:  # the dry run said yes; a real failure here is not the user's
                    raise PatchError(f"patch {patch.name} failed on a scratch copy: {output}", exit_code=1)
                statuses[patch.name] = "not applied" if check else "applied"
                continue
            if _run_patch(scratch, patch, reverse=True, dry_run=True)[0]:
                statuses[patch.name] = "already applied"
                continue
            raise PatchError(
                f"patch {patch.name} ({patch.path}) does not apply to {target}: "
                f"{_failure_details(output)}. Nothing was changed. The installed sglang differs from "
                f"the {patch_set.sglang_version} wheel: reinstall it (pip install --force-reinstall "
                f"--no-deps sglang=={patch_set.sglang_version}) and run again, or refresh the patch "
                "against it (see docs/patches.md)"
            )

        failures = check_post_conditions(scratch, patch_set)
        if failures:
            raise PatchError(
                "post-conditions failed after patching (target left unchanged): " + "; ".join(failures),
                exit_code=1,
            )

        changed = tuple(
            rel for rel in patch_set.files if (scratch / rel).read_bytes() != (target / rel).read_bytes()
        )
        if check:
            return Outcome(statuses, changed, record_written=False)
        for rel in changed:
            dst = target / rel
            _write_atomic(dst, (scratch / rel).read_bytes(), dst.stat().st_mode & 0o7777)

    expected = _expected_record(patch_set)
    path = record_path(target)
    try:
        current = read_record(target)
    except ValueError:
        current = None
    written = current != expected
    if written:
        text = json.dumps(expected.to_json(), indent=2, sort_keys=True) + "\n"
        _write_atomic(path, text.encode(), 0o644)
    return Outcome(statuses, changed, record_written=written)


def _run(args: argparse.Namespace) -> int:
    target = Path(args.target).resolve() if args.target else find_site_packages()
    _check_target(target)
    version = installed_version(target, editable_fallback=not args.target)
    patch_set = load_patch_set(version)
    print(f"sglang {version} in {target}: {len(patch_set.patches)} patch(es) from {patch_set.directory}")
    outcome = apply_patch_set(target, patch_set, check=args.check)
    for name, status in outcome.statuses.items():
        print(f"  {status:<16} {name}")
    n_post = sum(len(p.post) for p in patch_set.patches)
    if not args.check:
        print(f"post-conditions: {n_post}/{n_post} hold")
        print(f"record: {record_path(target)}{' (written)' if outcome.record_written else ' (unchanged)'}")
        return 0
    pending = [n for n, s in outcome.statuses.items() if s == "not applied"]
    if pending:
        print(
            f"not applied: {', '.join(pending)}; run `python {Path(__file__)} --target {target}`",
            file=sys.stderr,
        )
        return 1
    try:
        record = read_record(target)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if record != _expected_record(patch_set):
        state = "missing" if record is None else "out of date"
        print(
            f"patch record {record_path(target)} is {state}; "
            f"run `python {Path(__file__)} --target {target}` to rewrite it",
            file=sys.stderr,
        )
        return 1
    print(f"post-conditions: {n_post}/{n_post} hold; record {record_path(target)} matches")
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 1 runtime failure / --check found work, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="apply.py",
        description="Apply and verify the kit's patches to the installed SGLang.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--target",
        metavar="SITE_PACKAGES",
        help="site-packages directory holding sglang (default: the one this Python imports sglang from)",
    )
    parser.add_argument(
        "--check", action="store_true", help="verify only: exit 0 when every patch is applied and recorded"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except PatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
