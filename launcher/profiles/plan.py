"""Profile + spec mode (+ model overlay) + host facts -> Plan: the exact environment and SGLang command line.

This is the one module that turns profile keys into command-line flags.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from launcher import settings
from launcher.errors import UserError
from launcher.profiles import loader as profiles
from launcher.profiles.adaptive_tiers import AdaptiveTiers, PlanTiers
from launcher.profiles.adaptive_tiers import coerce as coerce_adaptive_tiers
from launcher.profiles.envsubst import Placeholders, UnsetVariable, expand
from launcher.profiles.hostfacts import HostFacts
from launcher.profiles.spec_params import KEYS as SPEC_PARAM_KEYS
from launcher.profiles.spec_params import SpecParams, from_flags, from_server, is_eagle
from launcher.profiles.spec_params import apply as apply_spec_params
from launcher.profiles.spec_params import coerce as coerce_spec_params
from launcher.state_layout import StatePaths

DEFAULT_SERVER_CMD = ("python", "-m", "sglang.launch_server")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class Plan(BaseModel):
    """The one typed plan: built here, carried as itself through the runtime, serialised only at the
    edges (state files, HTTP) by `to_json` and read back by `from_json`."""

    model_config = ConfigDict(strict=True, extra="ignore")  # stored computed keys (digest) are recomputed
    name: str
    spec: str
    description: str
    status: str
    env: dict[str, str]
    argv: list[str] = Field(min_length=1)
    flags: list[str]
    patches: list[str]
    requires: dict
    expects: list[str] = []  # backends the server must show running (launcher/runtime/activation.py)
    warnings: list[str]
    sources: list[str]
    server_url: str  # where the server answers, from the flags it was built with (a wildcard address on loopback)
    # EAGLE's (steps, topk, draft_tokens) as the flags pin them (the overlay's, the profile's
    # [spec_params], or a --spec-params point); None for off/ngram. Carried by the flags, so both
    # digests follow it.
    spec_params: SpecParams | None = None
    # The profile file whose [spec_params] table pinned `spec_params`; None when the point is the
    # overlay's or an explicit one. Left out of `to_json` when None.
    spec_params_from: str | None = None
    # The model overlay laid last (profiles/model/<name>.toml), None for none; its flags and env are in
    # `flags`/`env`, so both digests cover it. Left out of `to_json` when None.
    model_overlay: str | None = None
    # The files the flags name for the server to read (FILE_FLAGS: the adaptive EAGLE config), as
    # {path: sha256 (16 hex)} taken when the plan was built; both digests hash the content in place of
    # the path, so an edited file makes another plan and one file under two paths the same. Left out of
    # `to_json` when empty.
    files: dict[str, str] = {}
    # Under eagle3-adaptive with a tuned record (the API's `adaptive_tiers` or a profile's [adaptive_tiers]):
    # {"B": [steps]} per batch-size tier, written into the state dir for --speculative-adaptive-config
    # (launcher/profiles/adaptive_tiers.py); its file's hash is in `files`. Left out of `to_json` when None.
    adaptive_tiers: PlanTiers = None
    # The profile file whose [adaptive_tiers] table the plan runs; None when none or the API's record.
    adaptive_tiers_from: str | None = None

    @model_validator(mode="after")
    def _spec_params_from_flags(self) -> Plan:
        """A plan stored before plans carried `spec_params` reads them off its flags."""
        if self.spec_params is None:
            self.spec_params = from_flags(self.flags)
        return self

    def digest(self) -> str:
        """Hash of what the server actually gets: env, flags (not the command that runs them), patches."""
        payload = {"env": self.env, "flags": self.content_flags(), "patches": sorted(self.patches)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def content_flags(self) -> list[str]:
        """The flags with each FILE_FLAGS path replaced by `sha256:<its content's hash>` (`files`)."""
        if not self.files:
            return self.flags
        out = list(self.flags)
        for i, tok in enumerate(out[:-1]):
            if tok in FILE_FLAGS and out[i + 1] in self.files:
                out[i + 1] = f"sha256:{self.files[out[i + 1]]}"
        return out

    def local(self) -> dict[str, str]:
        """The flag values that belong to this host, not to the setup: model paths, host, port."""
        return split_local(self.flags)[1]

    def model(self) -> dict[str, dict[str, str | None]]:
        """Identity of each model the flags name (target, draft), independent of where it is stored."""
        return {key: model_identity(path) for key, path in self.local().items() if key in MODEL_KEYS}

    def setup_digest(self) -> str:
        """Hash of the setup alone: env, flags without host-local values, patches, and the models' identity.

        Equal on two hosts that run the same setup with the model stored elsewhere or another port,
        so a result can be reproduced and compared across hosts; `digest` still tells them apart. A
        model overlay counts through what it sets (flags, env), not through its name."""
        payload = {"env": self.env, "flags": split_local(self.content_flags())[0], "patches": sorted(self.patches),
                   "model": self.model()}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, data: object) -> Plan:
        """A stored plan (profile.json, committed.json, a journal); pydantic.ValidationError when damaged."""
        return cls.model_validate(data)

    def to_json(self) -> dict:
        data = self.model_dump()
        for key in ("model_overlay", "spec_params_from", "files", "adaptive_tiers", "adaptive_tiers_from"):
            if not data.get(key):
                data.pop(key, None)
        data["digest"] = self.digest()
        data["setup_digest"] = self.setup_digest()
        data["local"] = self.local()
        data["model"] = self.model()
        return data


LOCAL_FLAGS = ("--model-path", "--speculative-draft-model-path", "--host", "--port")
"""Flags whose value is where things are on one host; each takes exactly one value."""
MODEL_KEYS = ("model-path", "speculative-draft-model-path")


def split_local(flags: list[str]) -> tuple[list[str], dict[str, str]]:
    """(flags without the host-local ones, {flag name without dashes: value} of those)."""
    setup: list[str] = []
    local: dict[str, str] = {}
    it = iter(flags)
    for flag in it:
        if flag in LOCAL_FLAGS:
            local[flag.lstrip("-")] = next(it, "")
        else:
            setup.append(flag)
    return setup, local


ADAPTIVE_CONFIG_FLAG = "--speculative-adaptive-config"
FILE_FLAGS = (ADAPTIVE_CONFIG_FLAG,)
"""Flags whose value is a file the server reads: the setup is the file's content, not where it lies."""
RELATIVE_FILE_KEYS = tuple(f[2:] for f in FILE_FLAGS)
"""Their server keys: a relative path is read from the folder of the profile file that sets it."""


def file_sha(path: str) -> str:
    """16 hex characters of the sha256 of a file's bytes, or "unreadable"."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def flag_files(flags: list[str]) -> dict[str, str]:
    """{path: file_sha} of each file a FILE_FLAGS flag names."""
    return {flags[i + 1]: file_sha(flags[i + 1]) for i, tok in enumerate(flags[:-1]) if tok in FILE_FLAGS}


def model_identity(path: str) -> dict[str, str | None]:
    """A model as its directory's name plus a hash of its config.json (None when not readable here)."""
    try:
        config: str | None = hashlib.sha256((Path(path) / "config.json").read_bytes()).hexdigest()[:16]
    except OSError:
        config = None
    return {"name": PurePath(path.rstrip("/") or path).name or path, "config_sha256": config}


def server_cmd(environ: Mapping[str, str] | None = None) -> list[str]:
    custom = (settings.KIT_SERVER_CMD.get(environ) or "").strip()
    return shlex.split(custom) if custom else list(DEFAULT_SERVER_CMD)


def _scalar_str(value: object) -> str:
    if value is True:
        return "1"
    return str(value)


def model_overlay_of(model_overlay: str | None, environ: Mapping[str, str]) -> str | None:
    """The model overlay to lay: `model_overlay` when given ("" is none), else the MODEL_OVERLAY setting."""
    if model_overlay is None:
        return settings.MODEL_OVERLAY.get(environ)
    return model_overlay or None


def resolve(profile: str, spec: str, environ: Mapping[str, str],
            model_overlay: str | None = None) -> tuple[profiles.Resolved, dict[str, str], dict]:
    """Load, lay the spec overlay and the model overlay (a name; None: none), and expand `${VAR}`
    references in every value."""
    res = profiles.load(profile)
    profiles.apply_spec(res, spec)
    if model_overlay:
        profiles.apply_model_overlay(res, model_overlay)
    unset: list[str] = []  # every unset variable is named in one error, not one per attempt

    def value_of(value: str, where: str) -> str:
        try:
            return profiles.check_value(expand(value, environ, where), where)
        except UnsetVariable as exc:
            unset.append(str(exc))
            return ""

    env: dict[str, str] = {}
    for key, value in res.env.items():
        where = f"{res.origin[f'env.{key}']}: key 'env.{key}'"
        env[key] = value_of(value, where) if isinstance(value, str) else _scalar_str(value)
    server: dict = {}
    for key, value in res.server.items():
        where = f"{res.origin[f'server.{key}']}: key 'server.{key}'"
        if isinstance(value, list):
            server[key] = [value_of(v, where) if isinstance(v, str) else _scalar_str(v) for v in value]
        elif isinstance(value, str):
            server[key] = value_of(value, where)
            if (key in RELATIVE_FILE_KEYS and server[key] and not os.path.isabs(server[key])
                    and not (server[key].startswith("<") and server[key].endswith(">"))):  # `check`'s placeholder
                server[key] = str(res.origin[f"server.{key}"].parent / server[key])
        elif value is True:
            server[key] = True
        else:
            server[key] = _scalar_str(value)
    if unset:
        raise UserError("; ".join(unset))
    return res, env, server


def reach_url(server: Mapping[str, object]) -> str:
    """The URL the kit reaches the server on, from its host and port keys (SGLang's defaults otherwise)."""
    host = str(server.get("host") or "127.0.0.1")
    port = str(server.get("port") or 30000)
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def compose_flags(server: Mapping[str, object]) -> list[str]:
    argv: list[str] = []
    for key, value in server.items():
        flag = f"--{key}"
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            argv.extend([flag, *value])
        else:
            argv.extend([flag, str(value)])
    return argv


def evaluate(
    profile: str,
    spec: str | None = None,
    host_facts: HostFacts | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    use_parser: bool = False,
    model_overlay: str | None = None,
    spec_params: SpecParams | dict | str | None = None,
    adaptive_tiers: AdaptiveTiers | Mapping | str | None = None,
):
    """Build the plan and every rule finding, without raising on rule errors (doctor needs them all).

    `model_overlay`: a model overlay's name, "" for none; None reads the MODEL_OVERLAY setting from
    `environ` (a deployment's choice, so every plan a server builds carries it).
    `spec_params`: an EAGLE point (steps, topk, draft_tokens) replacing the spec overlay's three flags;
    UserError naming it when the spec mode is not EAGLE.

    The point's precedence: `spec_params` > the profile's [spec_params] table (through `extends`) >
    the spec overlay's [server] keys. The profile's table applies only when the composed keys run
    static EAGLE speculation; under off/ngram, and under --speculative-adaptive (whose steps SGLang moves
    itself; a profile's static point, such as a tune's winner, says nothing of where to start), it is
    ignored, without an error.

    `adaptive_tiers`: per batch-size tier, the EAGLE steps SGLang runs under eagle3-adaptive (UserError under any
    other spec mode); it wins over the profile's [adaptive_tiers] table, which applies only under
    --speculative-adaptive. Either is named by --speculative-adaptive-config as KIT_STATE_DIR/adaptive/<sha>.json,
    written there when the plan is rendered (render.write_plan), not here; the starting point is then the tiers'
    (`AdaptiveTiers.start_point`, the widest tier's steps under PCIe-IPC) unless `spec_params` gives one (its
    steps must be among the candidates: the `adaptive_config` rule)."""
    from launcher.profiles import rules

    env_src = dict(os.environ) if environ is None else environ
    spec = spec or settings.default_spec(env_src)
    overlay = model_overlay_of(model_overlay, env_src)
    res, env, server = resolve(profile, spec, env_src, overlay)
    point, pinned_by, tiers, tiers_from = _point_and_tiers(res, env, env_src, server, spec, spec_params, adaptive_tiers)
    flags = compose_flags(server)
    ctx = rules.Context(resolved=res, spec=spec, env=env, server=server, facts=host_facts, flags=flags,
                        adaptive_tiers={b: list(steps) for b, steps in tiers.tiers} if tiers is not None else None)
    findings = rules.evaluate(ctx, use_parser=use_parser)
    if pinned_by is not None:
        _blame_profile_point(findings, pinned_by)
    elif spec_params is not None and point is not None:
        _blame_option_point(findings, point)
    plan = _plan_of(profile, spec, res, env, server, flags, findings,
                    argv=server_cmd(env_src) + flags, overlay=overlay, pinned_by=pinned_by, tiers=tiers, tiers_from=tiers_from)
    return plan, findings


def _point_and_tiers(res: profiles.Resolved, env: Mapping[str, str], env_src: Mapping[str, str], server: dict,
                     spec: str, spec_params: SpecParams | dict | str | None,
                     adaptive_tiers: AdaptiveTiers | Mapping | str | None
                     ) -> tuple[SpecParams | None, Path | None, AdaptiveTiers | None, Path | None]:
    """(the EAGLE point, the profile file that pinned it, the adaptive tiers, the file that set them), by evaluate's
    precedence; `server` gets the tiers' config file and the point's three flags."""
    point = coerce_spec_params(spec_params)
    pinned_by: Path | None = None  # the profile file whose [spec_params] the plan runs
    if point is None and res.spec_params is not None and is_eagle(server) and server.get("speculative-adaptive") is not True:
        point, pinned_by = res.spec_params, res.origin["spec_params"]
    tiers, tiers_from = _adaptive_tiers(adaptive_tiers, res, server, spec)
    if tiers is not None:
        server["speculative-adaptive-config"] = str(tiers.path(StatePaths(settings.KIT_STATE_DIR.get(env_src)).adaptive))
        if point is None:  # under PCIe-IPC the workspace is sized from the start: the widest tier's steps
            point = tiers.start_point(widest=str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")) == "1")
    if point is not None:
        apply_spec_params(server, point, spec)
    return point, pinned_by, tiers, tiers_from


def _plan_of(profile: str, spec: str, res: profiles.Resolved, env: dict, server: dict, flags: list[str], findings: list,
             *, argv: list[str], overlay: str, pinned_by: Path | None, tiers: AdaptiveTiers | None,
             tiers_from: Path | None) -> Plan:
    """The Plan of the composed keys; the rules' `requires` conditions and warnings go into it."""
    requires = res.requires.model_dump(exclude_none=True)
    conditions = [f.message for f in findings if f.level == "requires"]
    if conditions:
        requires["conditions"] = conditions
    return Plan(
        name=profile, spec=spec, description=res.description, status=res.status, env=env, argv=argv, flags=flags,
        patches=list(res.requires.patches or []), requires=requires, expects=res.expects.backends(),
        warnings=[f.message for f in findings if f.level == "warning"], sources=[str(p) for p in res.chain],
        server_url=reach_url(server), model_overlay=overlay, spec_params=from_server(server),
        spec_params_from=str(pinned_by) if pinned_by is not None else None,
        # a tuned record's file is written when the plan is rendered (render.write_plan): its hash is the record's
        files={**flag_files(flags), **({server["speculative-adaptive-config"]: tiers.sha()} if tiers else {})},
        adaptive_tiers=tiers,
        adaptive_tiers_from=str(tiers_from) if tiers_from is not None else None,
    )


def _adaptive_tiers(given: AdaptiveTiers | Mapping | str | None, res: profiles.Resolved, server: Mapping[str, object],
                    spec: str) -> tuple[AdaptiveTiers | None, Path | None]:
    """(the tiers the plan runs, the profile file that set them or None): the given record, else the profile's
    [adaptive_tiers] under --speculative-adaptive, else none. A given record under any other mode is a UserError."""
    adaptive = server.get("speculative-adaptive") is True and is_eagle(server)
    tiers = coerce_adaptive_tiers(given)
    if tiers is not None:
        if not adaptive:
            raise UserError(f"adaptive_tiers {tiers.label()} apply under spec mode eagle3-adaptive only; spec mode "
                            f"'{spec}' does not run --speculative-adaptive: drop adaptive_tiers or choose "
                            "--spec eagle3-adaptive")
        return tiers, None
    if adaptive and res.adaptive_tiers is not None:
        return res.adaptive_tiers, res.origin["adaptive_tiers"]
    return None, None


_PINNED_FIELD = dict(zip((f"server.{k}" for k in SPEC_PARAM_KEYS), SpecParams.model_fields, strict=True))


def _blame_profile_point(findings: list, path: Path) -> None:
    """The rules judge the point as the three server keys and name the file that set them (the spec
    overlay); a point pinned by a profile's [spec_params] is that file's: name it and its key."""
    for f in findings:
        if f.key in _PINNED_FIELD:
            f.key, f.file = f"spec_params.{_PINNED_FIELD[f.key]}", path


def _blame_option_point(findings: list, point: SpecParams) -> None:
    """A point given as an option (--spec-params, a tune's --eagle3, a switch's spec_params) is the user's:
    a finding on its three server keys names the option, not the spec overlay the user never touched."""
    for f in findings:
        if f.key in _PINNED_FIELD:
            f.option, f.file = f"--spec-params {point.text()}", None


def build_plan(profile: str, spec: str | None = None, host_facts: HostFacts | None = None, **options: Any) -> Plan:
    """Plan for `profile` under `spec` (options as for `evaluate`); raises UserError listing every error finding."""
    plan, findings = evaluate(profile, spec, host_facts, **options)
    blocking = [f for f in findings if f.level in ("error", "ineligible")]
    if blocking:
        raise UserError("; ".join(f.render() for f in blocking))
    return plan


def check_environ(environ: Mapping[str, str] | None = None) -> Placeholders:
    """Environment for `check`: unset variables expand to `<NAME>` instead of failing."""
    return Placeholders(dict(os.environ) if environ is None else environ)
