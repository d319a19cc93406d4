"""Which (profile, spec) cells `bench run` measures, decided from what the server says.

Nothing is resolved locally: profile names and their status come from the control API's
GET /profiles and spec modes from GET /specs, so the bench container needs neither profiles/ nor
MODEL_PATH. With --no-switch the cell is labelled with what runs (/status), else with the names
the user gave, else `current`; a name the user gave that contradicts the server is an error.

Every name becomes part of a file name in the bundle, so each one, from the user or from a server,
must follow the profile name rule (launcher/profiles/policy.py NAME_PATTERN): a user's bad name is
exit 2, a server's is a runtime failure (exit 1), both before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from launcher.errors import RuntimeFailure, UserError
from launcher.profiles import adaptive_tiers
from launcher.profiles.catalog import check_name
from launcher.profiles.listing import ProfileRow
from launcher.runtime.api.bodies import ServerStatus

CURRENT = "current"
KEYWORDS = ("stable", "all")


def given_name(flag: str, name: str) -> str:
    """A name the user typed; UserError (exit 2) naming the flag when it breaks the name rule."""
    try:
        return check_name(flag.lstrip("-").rstrip("s"), name)
    except UserError as exc:
        raise UserError(f"{flag}: {exc}") from None


def server_name(kind: str, name: object, source: str) -> str:
    """A name a server or control API reported; RuntimeFailure (exit 1) when it breaks the name rule,
    since it would become a path in the bundle."""
    try:
        return check_name(kind, name)
    except UserError as exc:
        raise RuntimeFailure(f"{source} reports a {kind} name the bench cannot use: {exc}; nothing was written") from None


def csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def resolve_profiles(requested: str, available: Sequence[ProfileRow], where: str) -> list[str]:
    """Names, or the keywords 'stable' / 'all', against the server's profile list (exit 2 on unknown): GET /profiles'
    rows as the control client reads them."""
    names = csv(requested)
    if not names:
        raise UserError("--profiles is empty; give names, 'stable' or 'all'")
    known = [d.name for d in available]
    if names == ["all"]:
        chosen = known
    elif names == ["stable"]:
        chosen = [d.name for d in available if d.status == "stable"]
    else:
        for n in names:
            if n not in known:
                raise UserError(f"unknown profile '{n}' in --profiles; {where} knows: {', '.join(known) or '(none)'}")
        chosen = list(dict.fromkeys(names))
    if not chosen:
        raise UserError(f"--profiles {requested}: {where} lists no such profile; it knows: {', '.join(known) or '(none)'}")
    return [server_name("profile", n, where) for n in chosen]


def resolve_specs(requested: str, modes: Sequence[str], where: str) -> list[str]:
    specs = csv(requested)
    if not specs:
        raise UserError(f"--spec is empty; give one or more of {', '.join(modes)}")
    for sp in specs:
        if sp not in modes:
            raise UserError(f"unknown spec mode '{sp}' in --spec; {where} knows: {', '.join(modes) or '(none)'}")
    return [server_name("spec", sp, where) for sp in dict.fromkeys(specs)]


def single_name(flag: str, value: str | None) -> str | None:
    """--no-switch measures one running server: a flag given then names exactly one thing."""
    names = csv(value)
    if value is None:
        return None
    if len(names) != 1 or names[0] in KEYWORDS:
        raise UserError(
            f"{flag} '{value}' with --no-switch: the bench measures what is running, so give the one name "
            f"it runs under (or drop --no-switch to switch through the list)"
        )
    return names[0]


def spec_from_server_info(info: Mapping[str, object]) -> str | None:
    """The kit's spec-mode name for what a server runs (EAGLE3 -> eagle3, none -> off), if it says."""
    if not info:
        return None
    algo = info.get("speculative_algorithm")
    if not algo or str(algo).upper() == "NONE":
        return "off"
    if str(algo).upper() == "EAGLE3" and info.get("speculative_adaptive"):  # steps change while it serves
        return adaptive_tiers.SPEC_MODE
    return {"EAGLE3": "eagle3", "NGRAM": "ngram"}.get(str(algo).upper(), str(algo).lower())


def status_of(status: ServerStatus | Mapping[str, object] | None) -> ServerStatus | None:
    """/status as its model, also from the body as the bundle records it (`ServerStatus.to_json`);
    RuntimeFailure when that body is not /status's shape."""
    if status is None or isinstance(status, ServerStatus):
        return status
    try:
        return ServerStatus.model_validate(status)
    except ValidationError as exc:
        raise RuntimeFailure(f"the control API's /status is not a status the bench can read: {exc.errors()[0]['msg']}; "
                             "nothing was written") from None


def no_switch_label(
    given_profile: str | None,
    given_spec: str | None,
    status: ServerStatus | Mapping[str, object] | None,
    server_info: Mapping[str, object],
) -> tuple[str, str]:
    """(profile, spec) of the one cell: the server's own word first, then the user's names, then `current`."""
    running = status_of(status)
    running_p = running.profile if running is not None else None
    if running_p:
        running_p = server_name("profile", running_p, "the control API's /status")
    if running is not None and running.spec:
        running_s = server_name("spec", running.spec, "the control API's /status")
    else:
        running_s = spec_from_server_info(server_info)
        if running_s:
            running_s = server_name("spec", running_s, "the server's /server_info (speculative_algorithm)")
    for flag, given, running, source in (
        ("--profiles", given_profile, running_p, "the control API's /status"),
        ("--spec", given_spec, running_s, "the server"),
    ):
        if given and running and given != running:
            raise UserError(
                f"{flag} {given} with --no-switch, but {source} says it runs {running}; "
                f"name {running}, or drop --no-switch to switch to {given}"
            )
    return (running_p or given_profile or CURRENT), (running_s or given_spec or CURRENT)
