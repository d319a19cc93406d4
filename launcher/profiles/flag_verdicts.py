"""SGLang's verdict on a command line, kept on disk: the parser costs seconds to build (importing
`sglang.srt.server_args` imports torch), and the same plans are checked again by every `serve`,
switch and `check`.

A verdict is stored under a key of everything it can depend on: the Python, the installed sglang
(its folder, its version, and the size and mtime of every .py file in it), the SGLANG_* environment
(SGLang's `environ.py` reads defaults from it), and the flags. Values that the parser takes as any
string (`str`-typed: --host, --model-path, --speculative-draft-model-path) and --port's digits are
left out of the key, so plans that differ only in those share one verdict; every other value is in it.
Files are written atomically and read defensively: anything unreadable, or stored under another key,
is computed again. Deleting the folder is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from launcher import atomic, settings

FORMAT = 1
# argparse types in SGLang 0.5.23's parser: str for these, int for --port (docs/evidence.md,
# "Serving and measurement"). A value beginning with "-" is kept: argparse reads it as a flag.
STRING_VALUED = frozenset({"--host", "--model-path", "--speculative-draft-model-path"})
DIGITS_VALUED = frozenset({"--port"})

Problems = list[tuple[str, str]]


def cache_dir() -> Path:
    """KIT_CACHE_DIR, else $XDG_CACHE_HOME/sglang-kit, else ~/.cache/sglang-kit."""
    chosen = settings.KIT_CACHE_DIR.get()
    if chosen is not None:
        return chosen
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sglang-kit"


def _blind(flag: str, value: str) -> bool:
    if value.startswith("-"):
        return False
    return flag in STRING_VALUED or (flag in DIGITS_VALUED and value.isdigit())


def canonical_flags(flags: list[str]) -> list[str]:
    """The flags with the values the parser cannot refuse replaced by a placeholder."""
    out: list[str] = []
    blind_next = False
    for tok in flags:
        if blind_next and _blind(out[-1], tok):
            out.append("<value>")
            blind_next = False
            continue
        blind_next = False
        name, eq, value = tok.partition("=")
        if eq and tok.startswith("--") and _blind(name, value):
            out.append(f"{name}=<value>")
            continue
        out.append(tok)
        blind_next = tok in STRING_VALUED or tok in DIGITS_VALUED
    return out


@functools.lru_cache(maxsize=4)
def _sglang_fingerprint(folder: str) -> str:
    h = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(path, folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _sglang_identity() -> dict[str, str] | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.realpath(list(spec.submodule_search_locations)[0])
    try:
        from importlib.metadata import version

        ver = version("sglang")
    except Exception:
        ver = "unknown"
    return {"path": folder, "version": ver, "files": _sglang_fingerprint(folder)}


def key_of(flags: list[str]) -> dict | None:
    """What a verdict for `flags` depends on; None when sglang cannot be found (nothing is stored)."""
    sglang = _sglang_identity()
    if sglang is None:
        return None
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("SGLANG_")}
    return {"format": FORMAT, "python": sys.version, "executable": os.path.realpath(sys.executable),
            "sglang": sglang, "env": env, "flags": canonical_flags(flags)}


def _path_for(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache_dir() / "flag-verdicts" / f"{digest}.json"


def _load(path: Path, key: dict) -> Problems | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        return [(str(flag), str(message)) for flag, message in data["problems"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def verdict(flags: list[str], compute: Callable[[list[str]], Problems]) -> Problems:
    """compute(flags), or the verdict stored for the same key. A cache that cannot be written is skipped."""
    key = key_of(flags)
    if key is None:
        return compute(flags)
    path = _path_for(key)
    stored = _load(path, key)
    if stored is not None:
        return stored
    problems = compute(flags)
    try:
        atomic.write_json(path, {"key": key, "problems": [list(p) for p in problems]})
    except OSError:
        pass
    return problems
