"""Where a results bundle came from, as its manifest records it: the host's fingerprint and the kit's version."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from bench import JsonObject
from launcher import __version__, settings


def host_fingerprint() -> JsonObject:
    """The doctor's facts about this host (GPUs, driver, links, NCCL): one fingerprinter for the kit."""
    from launcher.doctor.fingerprint import host_fingerprint as doctor_fingerprint

    return doctor_fingerprint()


def kit_info() -> JsonObject:
    """Kit version, git sha (git, else KIT_GIT_SHA) and image id (KIT_IMAGE_ID)."""
    repo = Path(__file__).resolve().parent.parent.parent
    sha = None
    if shutil.which("git") and (repo / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        sha = out if re.fullmatch(r"[0-9a-f]{40}", out) else None
    return {"version": __version__, "git_sha": sha or settings.KIT_GIT_SHA.get(), "image_id": settings.KIT_IMAGE_ID.get()}
