"""Shared test helpers: temp profile folders, a fixed environment, host facts, launcher subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from launcher.profiles.hostfacts import GpuFact, HostFacts

REPO = Path(__file__).resolve().parent.parent
BUILTIN = REPO / "profiles"
SITECUSTOMIZE_DIR = REPO / "sitecustomize"
# The environment golden plans and most tests use: model paths set, every KIT_* knob unset.
ENV = {"MODEL_PATH": "/models/target", "DRAFT_MODEL_PATH": "/models/draft"}


def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop every KIT_* knob, SPEC and MODEL_OVERLAY so a developer's shell cannot change what a test sees."""
    for key in list(os.environ):
        if key.startswith("KIT_") or key in ("SPEC", "MODEL_OVERLAY"):
            monkeypatch.delenv(key)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess: the caller's, minus KIT_*/SPEC/MODEL_OVERLAY/PYTHONPATH, plus ENV and `extra`."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith("KIT_") and k not in ("SPEC", "MODEL_OVERLAY", "PYTHONPATH")
    }
    env.update(ENV)
    env.update(extra)
    return env


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def profile_toml(
    description: str | None = "test profile",
    *,
    extends: str | None = None,
    status: str | None = None,
    requires: Mapping[str, object] | None = None,
    env: Mapping[str, object] | None = None,
    server: Mapping[str, object] | None = None,
) -> str:
    """Text of a profile file from plain values (tables only when given)."""
    lines: list[str] = []
    if extends is not None:
        lines.append(f"extends = {_toml_value(extends)}")
    if description is not None:
        lines.append(f"description = {_toml_value(description)}")
    if status is not None:
        lines.append(f"status = {_toml_value(status)}")
    for table, values in (("requires", requires), ("env", env), ("server", server)):
        if values is None:
            continue
        lines.append(f"[{table}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in values.items())
    return "\n".join(lines) + "\n"


def write_profiles(root: Path, files: Mapping[str, str]) -> Path:
    """Write `{"name.toml" or "spec/mode.toml": text}` under root; returns root."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def facts(
    interconnect: str | None = None,
    sm: str | None = None,
    *,
    n: int = 8,
    p2p_ok: bool | None = None,
    bad_pairs: list[tuple[int, int]] | None = None,
    nvlink_multicast: bool | None = None,
    rdma_nics: list[str] | None = None,
) -> HostFacts:
    gpus = [GpuFact(index=i, name="GPU", compute_cap=sm) for i in range(n)] if sm else []
    return HostFacts(
        gpus=gpus,
        interconnect=interconnect,
        p2p_ok=p2p_ok,
        p2p_bad_pairs=bad_pairs or [],
        nvlink_multicast=nvlink_multicast,
        rdma_nics=rdma_nics,
    )


def run_launcher(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m launcher ARGS` in a real subprocess, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=REPO,
        env=dict(child_env() if env is None else env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
