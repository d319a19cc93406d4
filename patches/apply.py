#!/usr/bin/env python3
"""Apply the kit's patches to an installed SGLang, verify them, and record what is applied.

    python patches/apply.py [--target SITE_PACKAGES] [--check]

Stdlib only, and it never imports sglang or the kit: the Docker build runs it before the
kit is installed. The patch set is chosen by the installed sglang version
(patches/<version>/series.toml). Every patch is first tried on a scratch copy of the
files it touches, so a patch that does not apply, or a failed post-condition, leaves
the target unchanged.

This file is the command line; the work is in its sibling modules: `sglang_install` (which
sglang, where), `series` (series.toml), `apply_series` (scratch copy, then the target) with
`gnu_patch` and `postconditions`, and `record` (kit_patches.json).

Exit codes: 0 = applied or already applied (with --check: all applied and recorded);
1 = --check found patches or the record missing, a post-condition failed, or the
system `patch` program is missing; 2 = no sglang, wrong sglang version, or a patch
that does not apply (nothing changed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ != "patches":
    # Run as a script (`python patches/apply.py`, as the image build does) or loaded from its path:
    # import this folder as the `patches` package (this one, whatever else sys.path holds), so that
    # the sibling modules below import the same way in every case.
    _root = str(Path(__file__).resolve().parent.parent)
    sys.path.insert(0, _root)
    try:
        import patches  # noqa: F401
    finally:
        sys.path.remove(_root)

from patches.apply_series import Outcome, apply_patch_set  # noqa: E402
from patches.errors import PatchError  # noqa: E402
from patches.postconditions import check_post_conditions  # noqa: E402
from patches.record import RECORD_NAME, PatchRecord, expected_record, read_record, record_path  # noqa: E402
from patches.series import (  # noqa: E402
    MANIFEST_NAME,
    PATCHES_DIR,
    Patch,
    PatchSet,
    PostCondition,
    available_versions,
    load_patch_set,
    touched_files,
)
from patches.sglang_install import check_target, find_site_packages, installed_version  # noqa: E402

# What `patches.apply` has always offered callers (docs/patches.md, the launcher's tests).
__all__ = [
    "MANIFEST_NAME", "PATCHES_DIR", "RECORD_NAME", "Outcome", "Patch", "PatchError", "PatchRecord", "PatchSet", "PostCondition",
    "apply_patch_set", "available_versions", "check_post_conditions", "find_site_packages", "installed_version",
    "load_patch_set", "main", "read_record", "record_path", "touched_files",
]


def _run(args: argparse.Namespace) -> int:
    target = Path(args.target).resolve() if args.target else find_site_packages()
    check_target(target)
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
    if record != expected_record(patch_set):
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
