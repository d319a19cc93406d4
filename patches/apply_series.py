"""A whole patch set onto a site-packages: on a scratch copy first, the target only when all of it holds."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patches.errors import PatchError
from patches.gnu_patch import failure_details, run_patch
from patches.postconditions import check_post_conditions
from patches.record import expected_record, read_record, record_path, write_atomic
from patches.series import PatchSet


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
            ok, output = run_patch(scratch, patch, dry_run=True)
            if ok:
                ok, output = run_patch(scratch, patch)
                if not ok:  # the dry run said yes; a real failure here is not the user's
                    raise PatchError(f"patch {patch.name} failed on a scratch copy: {output}", exit_code=1)
                statuses[patch.name] = "not applied" if check else "applied"
                continue
            if run_patch(scratch, patch, reverse=True, dry_run=True)[0]:
                statuses[patch.name] = "already applied"
                continue
            raise PatchError(
                f"patch {patch.name} ({patch.path}) does not apply to {target}: "
                f"{failure_details(output)}. Nothing was changed. The installed sglang differs from "
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
            write_atomic(dst, (scratch / rel).read_bytes(), dst.stat().st_mode & 0o7777)

    expected = expected_record(patch_set)
    path = record_path(target)
    try:
        current = read_record(target)
    except ValueError:
        current = None
    written = current != expected
    if written:
        text = json.dumps(expected.to_json(), indent=2, sort_keys=True) + "\n"
        write_atomic(path, text.encode(), 0o644)
    return Outcome(statuses, changed, record_written=written)
