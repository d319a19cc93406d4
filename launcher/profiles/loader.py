"""Profile files: TOML schema, discovery and `extends` inheritance.

A profile file is a public contract (users write their own):

    extends = "nccl-tuned"   # optional parent profile name
    description = "one line"
    status = "stable"        # or "experimental"
    [requires]               # sm, interconnect, p2p, nvlink_multicast, patches
    [expects]                # what must be running once it is healthy: allreduce, fusion, a2a
    [env]                    # NAME = scalar; false drops a key inherited through extends (sitecustomize never unsets a process variable)
    [server]                 # SGLang flag without dashes = value; true -> bare flag, false -> omitted
    [spec_params]            # steps, topk, draft_tokens: the EAGLE point this profile runs under EAGLE speculation
    [adaptive_tiers]         # "B" = [S, ...]: per batch-size tier, the EAGLE steps it runs under eagle3-adaptive

Every profile implicitly starts from `base.toml`; speculation modes live in `spec/<mode>.toml`
in the same format (but for [spec_params]: an overlay pins its point with its own [server] keys)
and are laid over the merged profile; a model overlay, `model/<name>.toml`
(description, [env] and [server] only: what one model needs whatever the profile, such as its
tool-call and reasoning parsers), is laid over both, last. Which names exist, and in which folder,
is launcher/profiles/catalog.py's answer (the Makefile asks it too).

[spec_params] is inherited through `extends` as one table (the nearest file that has it wins) and
is applied by plan.evaluate after the overlays, over the spec overlay's three keys, when the plan
runs EAGLE speculation; an explicit point (`--spec-params`, the API's `spec_params`) wins over it.
[adaptive_tiers] is inherited the same way and applied only under --speculative-adaptive
(launcher/profiles/adaptive_tiers.py); the API's `adaptive_tiers` wins over it.

Profile, spec and model overlay names match policy.NAME_PATTERN (lowercase letters, digits, '.', '_', '-'; at
most 64) and resolve only to regular files inside the profile folders. A file over MAX_FILE_BYTES (1 MiB) is refused
unread, a description over DESCRIPTION_MAX characters too; whatever a file holds (a 5000-digit integer or tier
key, arrays nested 5000 deep) is a UserError naming it, never another exception. `describe_all` lists a profile
that cannot be resolved as `invalid` with its reason in one short line, and every other one still lists.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from launcher import settings
from launcher.errors import UserError, schema_error
from launcher.profiles import adaptive_tiers, policy
from launcher.profiles.adaptive_tiers import AdaptiveTiers
from launcher.profiles.catalog import (  # discovery lives there; callers may import these from here too
    BASE_NAME,
    MODEL_DIR,
    SPEC_DIR,
    available_names,
    check_name,
    find_file,
    model_overlays,
    search_dirs,
    spec_modes,
)
from launcher.profiles.spec_params import RANGE, SpecParams

Scalar = str | int | float | bool
_NAME = re.compile(policy.NAME_PATTERN)
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLAG_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
_BAD_CHARS = ("\0", "\n", "\r")
MAX_FILE_BYTES = 1 << 20  # a profile, spec or model overlay file larger than this is refused unread (1 MiB)
DESCRIPTION_MAX = 1000  # characters a description may hold (the plan, /status and history carry it)


def check_value(value: str, where: str) -> str:
    """Values reach environ and argv: a NUL or a line break would smuggle in another entry."""
    if any(c in value for c in _BAD_CHARS):
        raise UserError(f"{where}: the value contains a NUL byte or a line break; remove it")
    return value


class Requires(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sm: list[str] | None = None
    interconnect: Literal["pcie", "nvlink", "any"] | None = None
    p2p: bool | None = None
    nvlink_multicast: bool | None = None
    patches: list[str] | None = None


class Expects(BaseModel):
    """The backends the server must show running (launcher/runtime/activation.py reads its log).

    allreduce: which all-reduce carries the TP reductions ("nccl" needs no proof); fusion: the
    FlashInfer all-reduce + RMSNorm fusion kernel; a2a: the MoE all-to-all."""

    model_config = ConfigDict(extra="forbid", strict=True)
    allreduce: Literal["nccl", "pcie-ipc", "mscclpp"] | None = None
    fusion: bool | None = None
    a2a: Literal["none", "deepep"] | None = None

    def backends(self) -> list[str]:
        """Names in start_lines.DETECTORS, in a fixed order."""
        out = []
        if self.allreduce in ("pcie-ipc", "mscclpp"):
            out.append(self.allreduce)
        if self.fusion:
            out.append("fusion")
        if self.a2a == "deepep":
            out.append("deepep")
        return out


class ProfileFile(BaseModel):
    """One TOML file exactly as written; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    extends: str | None = None
    description: str | None = None
    status: Literal["stable", "experimental"] | None = None
    requires: Requires = Requires()
    expects: Expects = Expects()
    env: dict[str, Scalar] = {}
    server: dict[str, Scalar | list[Scalar]] = {}
    spec_params: SpecParams | None = None  # EAGLE point; profiles only (overlays refuse it)
    # per batch-size tier, the EAGLE-3 steps under eagle3-adaptive; profiles only. Taken as written (a table, or
    # anything else) and judged by the one parser of tiers, launcher/profiles/adaptive_tiers.py (`read_file`), so a
    # step "3", true or 1.0 is refused as the API and --adaptive-tiers refuse it, not coerced
    adaptive_tiers: Any = None

    @field_validator("description")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        if v is not None and ("\n" in v or not v.strip()):
            raise ValueError("description must be one non-empty line")
        if v is not None and len(v) > DESCRIPTION_MAX:
            raise ValueError(f"description must be one line of at most {DESCRIPTION_MAX} characters, not {len(v)}")
        return v



def _check_entries(path: Path, pf: ProfileFile) -> None:
    """[env] names and [server] flags, and what their values may hold; the error names the exact key."""
    for key, value in pf.env.items():
        where = f"{path}: key 'env.{key[:80]}'"
        if not _ENV_KEY.fullmatch(key):
            raise UserError(f"{where}: not a valid environment variable name; use letters, digits and '_', "
                            "not starting with a digit")
        reason = policy.reserved_env_reason(key)
        if reason:
            raise UserError(f"{where}: a profile may not set it: {reason}; remove the key")
        if isinstance(value, str):
            check_value(value, where)
    for key, value in pf.server.items():
        where = f"{path}: key 'server.{key[:80]}'"
        if key.startswith("-"):
            raise UserError(f"{where}: write the flag without leading dashes, e.g. '{key.lstrip('-')}'")
        if not _FLAG_KEY.fullmatch(key):
            raise UserError(f"{where}: not a flag name; use lowercase letters, digits, '-' and '_'")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_value(item, where)


@dataclass
class Resolved:
    """A profile after inheritance: merged tables plus where each key came from."""

    name: str
    description: str
    status: str
    path: Path
    requires: Requires
    expects: Expects = field(default_factory=Expects)
    env: dict[str, Scalar] = field(default_factory=dict)
    server: dict[str, Scalar | list[Scalar]] = field(default_factory=dict)
    origin: dict[str, Path] = field(default_factory=dict)  # "env.NAME" / "server.flag" / "spec_params" -> file
    chain: list[Path] = field(default_factory=list)
    spec_params: SpecParams | None = None  # the profile's [spec_params] pin (origin "spec_params"), None for none
    adaptive_tiers: AdaptiveTiers | None = None  # the profile's [adaptive_tiers] (origin "adaptive_tiers"), None for none


def _read_text(path: Path) -> str:
    """A regular file's text, opened without blocking (a FIFO swapped in is refused, not waited on), at most
    MAX_FILE_BYTES; UserError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UserError(f"{path}: not a regular file; a profile is a .toml file")
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_BYTES:
            raise UserError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB ({st.st_size} bytes), refused unread; "
                            "a profile holds a few tables: shorten the file")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the profile ({type(exc).__name__}: {str(exc)[:120]}); fix or remove "
                        "the file") from exc


def read_file(path: Path) -> ProfileFile:
    text = _read_text(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}:{_toml_line(exc)}: TOML syntax error: {exc}; fix the line and retry") from exc
    except RecursionError as exc:  # tomllib recurses once per level of nested arrays or inline tables
        raise UserError(f"{path}: TOML nested too deeply to read; a profile's values are scalars or flat lists, "
                        "fix the file") from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits (Python's int-string conversion limit)
        raise UserError(f"{path}: TOML value cannot be read ({str(exc)[:120]}); fix the file") from exc
    try:
        pf = ProfileFile.model_validate(raw)
    except ValidationError as exc:
        if exc.errors()[0]["loc"][:1] == ("spec_params",):
            raise schema_error(path, exc, {"extra_forbidden": "remove it; [spec_params] holds steps, topk and "
                                           "draft_tokens only"},
                               f"{RANGE} (e.g. steps = 3)") from exc
        hints = {"extra_forbidden": "remove it; allowed top-level keys are extends, description, status, "
                 "[requires], [expects], [env], [server], [spec_params], [adaptive_tiers]"}
        raise schema_error(path, exc, hints, "see the profile format in docs/profiles.md") from exc
    except RecursionError as exc:
        raise UserError(f"{path}: nested too deeply to check; fix the file") from exc
    _check_entries(path, pf)
    if pf.adaptive_tiers is not None:  # the one parser of tiers (launcher/profiles/adaptive_tiers.py), strict
        adaptive_tiers.from_json(pf.adaptive_tiers, f"{path}: key 'adaptive_tiers'", adaptive_tiers.TOML_FORM)
    return pf


def _toml_line(exc: tomllib.TOMLDecodeError) -> int:
    lineno = getattr(exc, "lineno", None)
    if lineno:
        return int(lineno)
    m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
    return int(m.group(1)) if m else 0


def unknown_profile(name: str) -> UserError:
    known = ", ".join(available_names()) or "(none found)"
    return UserError(f"unknown profile '{name}'; known profiles: {known} (folders: {', '.join(map(str, search_dirs()))})")


def _merge(into: Resolved, pf: ProfileFile, path: Path) -> None:
    for table in ("env", "server"):
        target: dict = getattr(into, table)
        for key, value in getattr(pf, table).items():
            if value is False:
                target.pop(key, None)  # false drops the key `extends` brought in
            else:
                target[key] = value
            into.origin[f"{table}.{key}"] = path
    req = into.requires.model_dump()
    req.update(pf.requires.model_dump(exclude_none=True))
    into.requires = Requires.model_validate(req)
    exp = into.expects.model_dump()
    exp.update(pf.expects.model_dump(exclude_none=True))
    into.expects = Expects.model_validate(exp)
    if pf.spec_params is not None:  # one point, whole: the nearest file's table wins
        into.spec_params = pf.spec_params
        into.origin["spec_params"] = path
    if pf.adaptive_tiers is not None:  # one record, whole: the nearest file's table wins
        into.adaptive_tiers = adaptive_tiers.from_json(pf.adaptive_tiers, f"{path}: key 'adaptive_tiers'",
                                                       adaptive_tiers.TOML_FORM)
        into.origin["adaptive_tiers"] = path
    into.chain.append(path)


def load(name: str) -> Resolved:
    """Resolve `name` through `extends` (base first), raising UserError for cycles or unknown parents."""
    check_name("profile", name)
    path = find_file(name)
    if path is None or name == BASE_NAME:
        raise unknown_profile(name)
    lineage: list[tuple[str, Path, ProfileFile]] = []
    seen: list[str] = []
    cur: str | None = name
    cur_path: Path | None = path
    while cur is not None:
        if cur in seen:
            cycle = " -> ".join([*seen, cur])
            raise UserError(f"{lineage[-1][1]}: key 'extends': cycle {cycle}; break the cycle")
        seen.append(cur)
        assert cur_path is not None
        pf = read_file(cur_path)
        lineage.append((cur, cur_path, pf))
        parent = pf.extends
        if parent is not None:
            if not _NAME.fullmatch(parent):
                raise UserError(f"{cur_path}: key 'extends': '{parent[:80]}' is not a profile name; name a profile, not a path")
            parent_path = find_file(parent)
            if parent_path is None or parent == BASE_NAME:
                known = ", ".join(available_names())
                raise UserError(f"{cur_path}: key 'extends': unknown parent profile '{parent}'; known: {known}")
            cur, cur_path = parent, parent_path
        else:
            cur = None
    own = lineage[0][2]
    resolved = Resolved(
        name=name,
        description=own.description or "",
        status=own.status or "experimental",
        path=path,
        requires=Requires(),
    )
    base = find_file(BASE_NAME)
    if base is not None:
        _merge(resolved, read_file(base), base)
    for _, p, pf in reversed(lineage):
        _merge(resolved, pf, p)
    if not own.description:
        raise UserError(f"{path}: key 'description' is missing; add a one-line description = \"...\"")
    return resolved


def _refuse_spec_params(path: Path, pf: ProfileFile, kind: str) -> None:
    if pf.adaptive_tiers is not None:
        raise UserError(f"{path}: key 'adaptive_tiers': a {kind} may not hold an [adaptive_tiers] table (a "
                        "profile's, laid under eagle3-adaptive); remove the table")
    if pf.spec_params is not None:
        raise UserError(f"{path}: key 'spec_params': a {kind} may not hold a [spec_params] table (it pins its "
                        "point with its own [server] keys speculative-num-steps, speculative-eagle-topk and "
                        "speculative-num-draft-tokens; a profile's [spec_params] is laid over them); remove the table")


def read_spec_overlay(path: Path) -> ProfileFile:
    """A spec overlay file: the profile format without [spec_params]."""
    pf = read_file(path)
    _refuse_spec_params(path, pf, "spec overlay")
    return pf


def apply_spec(resolved: Resolved, mode: str) -> None:
    """Lay the speculation overlay `spec/<mode>.toml` over a resolved profile."""
    _lay(resolved, mode, SPEC_DIR, read_spec_overlay, lambda: UserError(
        f"unknown spec mode '{mode}'; known: {', '.join(spec_modes())} "
        f"(spec/<mode>.toml in: {', '.join(map(str, search_dirs()))})"))


def _lay(resolved: Resolved, name: str, folder: str, read: Callable[[Path], ProfileFile],
         unknown: Callable[[], UserError]) -> None:
    """Merge the overlay `<folder>/<name>.toml` (read by `read`, which checks its kind's keys) over `resolved`."""
    path = find_file(name, folder)
    if path is None:
        raise unknown()
    _merge(resolved, read(path), path)


MODEL_OVERLAY_KEYS = ("description", "env", "server")


def unknown_model_overlay(name: str) -> UserError:
    known = ", ".join(model_overlays()) or "(none found)"
    return UserError(
        f"unknown model overlay '{name}'; known model overlays: {known} (model/<name>.toml in: "
        f"{', '.join(map(str, search_dirs()))}); name one of them in {settings.MODEL_OVERLAY.name}, "
        "or leave it empty for none"
    )


def read_model_overlay(path: Path) -> ProfileFile:
    """A model overlay file: the profile format restricted to description, [env] and [server]."""
    pf = read_file(path)
    _refuse_spec_params(path, pf, "model overlay")
    extra = sorted(set(pf.model_fields_set) - set(MODEL_OVERLAY_KEYS))
    if extra:
        raise UserError(f"{path}: key '{extra[0]}': a model overlay holds only description, [env] and [server] "
                        "(what the model needs, whatever the profile); remove it")
    if not pf.description:
        raise UserError(f"{path}: key 'description' is missing; add a one-line description = \"...\"")
    return pf


def apply_model_overlay(resolved: Resolved, name: str) -> None:
    """Lay the model overlay `model/<name>.toml` over a resolved profile and its spec mode, last."""
    _lay(resolved, name, MODEL_DIR, read_model_overlay, lambda: unknown_model_overlay(name))
