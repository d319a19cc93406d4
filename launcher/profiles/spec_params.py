"""EAGLE-3's speculation parameters (steps, top-k, draft tokens) as one typed point of a plan.

This module is the one definition of an EAGLE-3 point for the whole kit: its type (`SpecParams`), its
validity (`point_problems`, SGLang 0.5.23's own checks) and its text form `S,K,D` (`parse`,
`parse_list`). The spec overlay (profiles/spec/eagle3.toml) pins a point; a profile's `[spec_params]`
table, `--spec-params S,K,D` (launcher show / check / switch, launcher fleet switch), the control
API's `spec_params`, `bench run --eagle3` and `bench tune --eagle3` replace the overlay's three flags
with another one, and each accepts or refuses a point the same way, with the same words. A point is
carried as these three SGLang flags, so the plan's digest and setup digest change with it; SGLang's
parser and the `eagle_spec_params` rule (rules/speculation.py) decide whether SGLang accepts it with
the rest of the plan (its attention backend, page size, rejection sampling).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, MutableMapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.errors import UserError

# server keys (flag names without dashes), in the model's field order
KEYS = ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens")
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3")  # the algorithms whose tree these three flags shape
FLAG = "--spec-params"
METAVAR = "S,K,D"
HELP = "EAGLE-3 point: steps, top-k, draft tokens (replaces the eagle3 overlay's; e.g. 1,1,2)"
MAX_VALUE = 1024  # the largest steps, top-k or draft tokens a point may give
RANGE = f"steps, topk and draft_tokens are whole numbers from 1 to {MAX_VALUE}"  # said by every refusal of a range

PositiveInt = Annotated[int, Field(strict=True, ge=1, le=MAX_VALUE)]


class SpecParams(BaseModel):
    """One EAGLE point: draft steps, top-k per step, draft tokens verified per pass."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    steps: PositiveInt
    topk: PositiveInt
    draft_tokens: PositiveInt

    def values(self) -> tuple[int, int, int]:
        return self.steps, self.topk, self.draft_tokens

    def text(self) -> str:
        """`1,1,2`: as `--spec-params` takes it."""
        return ",".join(str(v) for v in self.values())

    def tag(self) -> str:
        """`1-1-2`: the point inside a file name (bundle cells)."""
        return "-".join(str(v) for v in self.values())

    def label(self) -> str:
        """`(1,1,2)`: the point after a spec name, e.g. `fused+eagle3(1,1,2)`."""
        return f"({self.text()})"

    def server_flags(self) -> dict[str, str]:
        """The three server keys (flag names without dashes) this point sets, as the plan carries them."""
        return {key: str(value) for key, value in zip(KEYS, self.values(), strict=True)}


def add_argument(parser: argparse.ArgumentParser) -> None:
    """`--spec-params S,K,D` on a launcher command's parser: the value as given (None: left out), for `parse`."""
    parser.add_argument(FLAG, default=None, metavar=METAVAR, help=HELP)


def point_problems(point: SpecParams) -> list[str]:
    """SGLang 0.5.23's checks on a point that need nothing but the point (its parser takes any int):

    * top-k 1: draft tokens must be steps + 1, or SGLang replaces them (a warning, then
      `speculative_num_draft_tokens = speculative_num_steps + 1`; srt/arg_groups/speculative_hook.py:1255-1266),
      and the server would not run the point named;
    * top-k > 1: draft tokens - 1 must fit the draft tree, topk + (steps - 1) * topk^2 candidates, which
      torch.topk selects from (srt/speculative/eagle_utils.py:107-110), or the first verify fails.

    The checks that depend on other flags (attention backend, page size, rejection sampling) are in
    rules/speculation.py `eagle_spec_params`."""
    steps, topk, draft = point.values()
    out = []
    if topk == 1 and draft != steps + 1:
        out.append(f"{point.label()}: with top-k 1 SGLang replaces draft tokens by steps + 1 = {steps + 1} "
                   f"(speculative_hook.py:1255), so the server would not run this point; give {steps},1,{steps + 1}")
    tree = topk + (steps - 1) * topk * topk
    if topk > 1 and draft - 1 > tree:
        out.append(f"{point.label()}: the draft tree holds {tree} candidates, fewer than draft tokens - 1 = "
                   f"{draft - 1} (torch.topk in eagle_utils.py:110 fails); lower draft tokens or raise steps/top-k")
    return out


def read(text: str, flag: str = FLAG) -> SpecParams:
    """`S,K,D` -> SpecParams, its form and range checked but not SGLang's rules (`parse` adds those; a plan
    built from the point meets them in the `eagle_spec_params` rule); UserError naming the flag otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise UserError(f"{flag} '{str(text)[:40]}': give steps, top-k and draft tokens as S,K,D, three whole "
                        f"numbers (e.g. {flag} 1,1,2)")
    try:
        return SpecParams(steps=int(parts[0]), topk=int(parts[1]), draft_tokens=int(parts[2]))
    except ValidationError:
        raise UserError(f"{flag} '{text}': {RANGE}") from None


def parse(text: str, flag: str = FLAG) -> SpecParams:
    """`S,K,D` -> a point SGLang runs as given; UserError (exit 2) naming the flag and the point otherwise.
    Every flag that takes a point parses it here, so each refuses it with the same words."""
    point = read(text, flag)
    problems = point_problems(point)
    if problems:
        raise UserError(f"{flag} '{text}': " + "; ".join(problems))
    return point


def parse_list(text: str, flag: str) -> list[SpecParams]:
    """`S,K,D;S,K,D...` -> the points in order, duplicates dropped; UserError naming the flag and the point."""
    items = [t.strip() for t in str(text).split(";") if t.strip()]
    if not items:
        raise UserError(f"{flag} is empty; give one or more points S,K,D separated by ';' (e.g. {flag} '1,1,2;3,1,4')")
    return list(dict.fromkeys(parse(t, flag) for t in items))


def coerce(value: SpecParams | Mapping | str | None) -> SpecParams | None:
    """A point from what a caller holds: the model, a mapping (JSON body) or `S,K,D`."""
    if value is None or isinstance(value, SpecParams):
        return value
    if isinstance(value, str):
        return read(value)
    try:
        return SpecParams.model_validate(dict(value))
    except ValidationError as exc:
        raise UserError(f"spec_params: {exc.errors()[0]['msg']}; {RANGE}") from None


def lenient(value: object) -> SpecParams | None:
    """A point read back from a stored or reported record: the model, or None when it is none or not a point's
    JSON (a damaged record reads as no point; `coerce` refuses one instead)."""
    if isinstance(value, SpecParams):
        return value
    if not isinstance(value, Mapping):
        return None
    try:
        return SpecParams.model_validate(dict(value))
    except ValidationError:
        return None


def is_eagle(server: Mapping[str, object]) -> bool:
    return str(server.get("speculative-algorithm") or "").upper() in EAGLE_ALGORITHMS


def from_server(server: Mapping[str, object]) -> SpecParams | None:
    """The point the composed server keys pin, or None (not EAGLE, a key left to SGLang's auto-pick,
    or a value that is no whole number >= 1: the rule reports that one)."""
    if not is_eagle(server) or any(server.get(k) is None for k in KEYS):
        return None
    try:
        steps, topk, draft = (int(str(server[k])) for k in KEYS)
        return SpecParams(steps=steps, topk=topk, draft_tokens=draft)
    except (ValueError, ValidationError):
        return None


def from_flags(flags: list[str]) -> SpecParams | None:
    """The point a flag list pins (a stored plan written before plans carried `spec_params`)."""
    server: dict[str, object] = {}
    it = iter(flags)
    for tok in it:
        if tok in ("--speculative-algorithm", *(f"--{k}" for k in KEYS)):
            server[tok[2:]] = next(it, None)
    return from_server(server)


def apply(server: MutableMapping[str, object], point: SpecParams, spec: str) -> None:
    """Replace the overlay's three flags with `point` (in place; a key the overlay lacks is added).

    UserError (HTTP 400 / exit 2) naming the point when the spec mode is not EAGLE speculation."""
    if not is_eagle(server):
        algo = server.get("speculative-algorithm") or "none"
        raise UserError(f"spec_params {point.label()} apply to EAGLE-3 only (spec mode eagle3); spec mode '{spec}' "
                        f"runs speculative-algorithm {algo}: drop {FLAG} / spec_params or choose --spec eagle3")
    server.update(point.server_flags())


def label(profile: str, spec: str, point: SpecParams | Mapping | None) -> str:
    """`fused+eagle3`, or `fused+eagle3(1,1,2)` for a point."""
    p = coerce(point) if point is not None else None
    return f"{profile}+{spec}{p.label() if p else ''}"
