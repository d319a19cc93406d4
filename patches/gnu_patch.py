"""Running the system `patch` program on one patch, and reading why a patch did not apply."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from patches.errors import PatchError
from patches.series import Patch

_PATCH_FLAGS = ["-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "--reject-file=-"]


def run_patch(
    workdir: Path, patch: Patch, *, reverse: bool = False, dry_run: bool = False
) -> tuple[bool, str]:
    """(succeeded, patch's output) of one run; never leaves .orig or .rej files behind."""
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


def failure_details(output: str) -> str:
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
