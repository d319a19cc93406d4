"""Which profiles there are, as a listing shows them (`launcher profiles`, the control API's GET /profiles): one
`ProfileRow` per profile file, an invalid one with its reason, and nothing a file holds raises from here."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from launcher.errors import UserError
from launcher.profiles.catalog import available_names, find_file, misnamed_files
from launcher.profiles.loader import load

DESCRIPTION_SHOWN = 200  # characters of a description a listing shows
REASON_SHOWN = 300  # characters of an invalid profile's reason a listing shows


class ProfileRow(BaseModel):
    """One profile of a listing; `error` only on an invalid one (its reason, one short line)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    description: str
    status: str
    path: str
    error: str | None = None

    def wire(self) -> dict[str, str]:
        """The row as JSON carries it: no `error` key on a valid profile."""
        return self.model_dump(exclude_none=True)


def _shown(text: str, limit: int) -> str:
    """One short line of `text` for a listing: line breaks and other control characters escaped, cut at `limit`."""
    line = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[: limit + 1])
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _invalid(name: str, path: Path, reason: str) -> ProfileRow:
    return ProfileRow(name=name, description="", status="invalid", path=str(path), error=_shown(reason, REASON_SHOWN))


def describe_one(name: str) -> ProfileRow | None:
    """A listing's row for profile `name` (None: its file went away since the listing). A profile that cannot be
    resolved (a damaged file, itself or a parent; an `extends` cycle; no description) is `invalid`, with its reason
    as one short line; nothing a file holds raises from here."""
    path = find_file(name)
    if path is None:
        return None
    try:
        res = load(name)
    except UserError as exc:
        return _invalid(name, path, str(exc))
    except Exception as exc:  # noqa: BLE001 - one file must never take the listing down (nor GET /profiles)
        return _invalid(name, path, f"{path}: cannot be read ({type(exc).__name__}); fix or remove the file")
    return ProfileRow(name=name, description=_shown(res.description, DESCRIPTION_SHOWN), status=res.status,
                      path=str(path))


def describe_all() -> list[ProfileRow]:
    """Name, description, status and file of every visible profile (`launcher profiles`, the control API's GET
    /profiles): a profile that cannot be resolved is listed `invalid` with its reason, a .toml file whose name is
    no profile name too (catalog.misnamed_files), and every other one still lists."""
    out = [row for row in map(describe_one, available_names()) if row is not None]
    for path in misnamed_files():
        out.append(_invalid(_shown(path.stem, 64), path, f"{path.name}: the file name is not a profile name: use "
                            "1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; "
                            "rename the file"))
    return out
