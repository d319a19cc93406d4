"""A tuned `--speculative-adaptive-config` as one typed record of a plan: per batch-size tier, the EAGLE-3
steps SGLang 0.5.23 may run there (0: decode that tier without speculation).

This module is the one definition of such a record for the kit: its type (`AdaptiveTiers`), its checks
(SGLang 0.5.23's own, plus the kit's: a starting step must exist), its text form `B:S,B:S` (several steps
of one tier as `B:S/S`), its JSON form `{"B": [S, ...]}` (the control API's `adaptive_tiers`, a profile's
`[adaptive_tiers]` table) and the file SGLang reads (`write`). `bench tune --adaptive` writes one from the
fastest static point at each concurrency level it measured (bench/tune/adaptive.py).

How SGLang 0.5.23 uses the file (srt/speculative/adaptive_spec_params.py):
* each integer-string key is a tier holding `candidate_steps`, a non-empty list of non-negative ints
  (`_load_adaptive_config`, :103-139); other keys are skipped;
* a batch is padded to the CUDA-graph batch size at or above it, then served by the largest tier at or
  below that size, the lowest tier when none is (`_route`, `_find_closest_bs`, :342-358);
* within a tier SGLang moves between its candidate steps from a moving average of the accept length
  (:153-272); a tier of one candidate never moves, so its steps are the tier's decision; 0 steps there
  decodes without drafting (:219-234);
* the starting `--speculative-num-steps` must be among the union of every tier's candidates or SGLang
  refuses to start (srt/arg_groups/speculative_hook.py:1416-1421); draft tokens become steps + 1
  (:1423-1427), and only top-k 1 adapts (adaptive_spec_params.py:75-79).

A plan that carries the record points `--speculative-adaptive-config` at a content-addressed file in the
state dir (`path`), which rendering the plan writes (launcher/profiles/render.py, `write`); the plan's `files` hash then stands for the content, so
two plans with the same tiers have the same digest wherever the file lies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher import atomic
from launcher.errors import UserError
from launcher.profiles.spec_params import MAX_VALUE, SpecParams

FLAG = "--adaptive-tiers"
SPEC_MODE = "eagle3-adaptive"  # the spec mode (profiles/spec/eagle3-adaptive.toml) such a record runs under
FIELD = "adaptive_tiers"  # the control API's body key and the profile's table
MAX_BATCH = 65536  # the largest tier key the kit accepts (a batch size)
FLAG_HELP = ("under --spec eagle3-adaptive: per batch-size tier B the EAGLE-3 steps S (0: no speculation), "
             "replacing the overlay's config (e.g. 1:3,4:1,16:0; launcher/profiles/adaptive_tiers.py)")
FORM = (f"give tiers as B:S,B:S (batch size B from 1 to {MAX_BATCH}, EAGLE-3 steps S from 0 to {MAX_VALUE}, "
        "0 = no speculation; several steps of one tier as B:S/S), e.g. 1:3,4:1,16:0")


@dataclass(frozen=True)
class AdaptiveTiers:
    """{batch size: candidate steps}, ordered by batch size, each tier's steps sorted and distinct."""

    tiers: tuple[tuple[int, tuple[int, ...]], ...]

    def __post_init__(self) -> None:
        problems = tier_problems(self.tiers)
        if problems:
            raise UserError(f"{FIELD}: " + "; ".join(problems))

    # ----- forms -------------------------------------------------------------------------------------
    def text(self) -> str:
        """`1:3,4:1,16:0`: as `--adaptive-tiers` takes it."""
        return ",".join(f"{b}:{'/'.join(str(s) for s in steps)}" for b, steps in self.tiers)

    def label(self) -> str:
        """`[1:3,4:1,16:0]`: after a spec name, e.g. `fused+eagle3-adaptive[1:3,4:1,16:0]`."""
        return f"[{self.text()}]"

    def to_json(self) -> dict[str, list[int]]:
        """`{"1": [3], "4": [1], "16": [0]}`: the control API's and tune.json's form."""
        return {str(b): list(steps) for b, steps in self.tiers}

    def sglang_config(self) -> dict[str, dict[str, list[int]]]:
        """The file SGLang reads: each tier's `candidate_steps`; SGLang's defaults for the rest (EMA, hysteresis)."""
        return {str(b): {"candidate_steps": list(steps)} for b, steps in self.tiers}

    def file_text(self) -> str:
        return json.dumps(self.sglang_config(), indent=2, sort_keys=False) + "\n"

    def sha(self) -> str:
        """16 hex characters of the file's sha256: its name in the state dir."""
        return hashlib.sha256(self.file_text().encode()).hexdigest()[:16]

    # ----- what SGLang does with it ------------------------------------------------------------------
    def union(self) -> list[int]:
        """Every tier's candidate steps: what the starting steps must be among (speculative_hook.py:1416-1421)."""
        return sorted({s for _, steps in self.tiers for s in steps})

    def steps_for(self, batch: int) -> tuple[int, ...]:
        """The candidate steps of the tier a batch of this size runs in: the largest tier at or below it, else
        the lowest (adaptive_spec_params.py:356-358; CUDA-graph padding, :348-354, left to the caller)."""
        chosen = self.tiers[0][1]
        for b, steps in self.tiers:
            if b <= batch:
                chosen = steps
        return chosen

    def start_point(self) -> SpecParams:
        """The point the server starts from: the lowest tier's smallest positive step, else the smallest positive
        step of any tier; top-k 1 and draft tokens steps + 1, as SGLang sets them (speculative_hook.py:1423-1427)."""
        lowest = [s for s in self.tiers[0][1] if s > 0]
        steps = min(lowest) if lowest else min(s for s in self.union() if s > 0)
        return SpecParams(steps=steps, topk=1, draft_tokens=steps + 1)

    def path(self, folder: Path) -> Path:
        """Where the file lies in `folder` (the state dir's `adaptive`): named by its content."""
        return Path(folder) / f"{self.sha()}.json"

    def write(self, folder: Path) -> Path:
        """The file `folder/<sha>.json`, written atomically unless it holds this content already (OSError as a
        state file's write, launcher/profiles/render.py)."""
        path = self.path(folder)
        text = self.file_text()
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            return path
        return atomic.write_text(path, text)


def tier_problems(tiers: object) -> list[str]:
    """What SGLang 0.5.23 or the kit refuses in a tiers record (empty: fine)."""
    if not isinstance(tiers, tuple) or not tiers:
        return [f"no tier given; {FORM}"]
    out: list[str] = []
    seen: set[int] = set()
    for b, steps in tiers:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BATCH:
            out.append(f"tier {str(b)[:20]!r} is no batch size from 1 to {MAX_BATCH}")
        elif b in seen:
            out.append(f"tier {b} given twice")
        else:
            seen.add(b)
        if (not isinstance(steps, tuple) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_VALUE for s in steps)):
            # adaptive_spec_params.py:121-130: a non-empty list of non-negative ints
            out.append(f"tier {b}: candidate steps must be whole numbers from 0 to {MAX_VALUE}, at least one")
    if not out and not any(s > 0 for _, steps in tiers for s in steps):
        out.append("every tier has 0 steps (no speculation anywhere): SGLang needs a starting step among "
                   "the candidates (speculative_hook.py:1416-1421), and no speculation at all is --spec off")
    return out


def _make(pairs: list[tuple[int, list[int]]], where: str) -> AdaptiveTiers:
    """The record from (batch, steps) pairs: tiers by batch size, each tier's steps sorted and distinct; UserError
    naming `where` with every problem."""
    tiers = tuple(sorted((b, tuple(sorted(set(steps)))) for b, steps in pairs))
    problems = tier_problems(tiers)
    if problems:
        raise UserError(f"{where}: " + "; ".join(problems))
    return AdaptiveTiers(tiers)


def parse(text: str, flag: str = FLAG) -> AdaptiveTiers:
    """`B:S,B:S/S` -> AdaptiveTiers; UserError naming the flag otherwise."""
    pairs: list[tuple[int, list[int]]] = []
    for item in (t.strip() for t in str(text).split(",")):
        b, sep, steps = item.partition(":")
        parts = steps.split("/")
        if not sep or not b.strip().isdigit() or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
            raise UserError(f"{flag} '{str(text)[:60]}': {FORM}")
        pairs.append((int(b), [int(p) for p in parts]))
    return _make(pairs, f"{flag} '{str(text)[:60]}'")


def from_json(value: Mapping[str, object], where: str = FIELD) -> AdaptiveTiers:
    """`{"1": [3], "4": [1]}` (the API's body, a profile table) -> AdaptiveTiers; UserError naming `where`."""
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: must be an object of tiers {{\"B\": [S, ...]}}; {FORM}")
    pairs: list[tuple[int, list[int]]] = []
    for key, steps in value.items():
        if not isinstance(key, str) or not key.isascii() or not key.isdigit():
            raise UserError(f"{where}: key {str(key)[:20]!r} is no batch size (an integer string such as \"1\"); {FORM}")
        if not isinstance(steps, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
            raise UserError(f"{where}: tier {key}: give a list of whole numbers of steps, e.g. [3]; {FORM}")
        pairs.append((int(key), steps))
    return _make(pairs, where)


def coerce(value: AdaptiveTiers | Mapping | str | None, where: str = FIELD) -> AdaptiveTiers | None:
    """A record from what a caller holds: the record, a JSON mapping or `B:S,...` text."""
    if value is None or isinstance(value, AdaptiveTiers):
        return value
    if isinstance(value, str):
        return parse(value, where)
    return from_json(value, where)


def from_levels(steps_by_level: Mapping[int, int]) -> AdaptiveTiers:
    """One tier per measured concurrency level, keyed at the level, holding the steps that won there (0: `off`
    won). A batch runs the tier of the largest level at or below its size, so the batches between two levels run
    the lower level's winner; the lowest level should be 1, which every single request's batch reaches."""
    return _make([(level, [steps]) for level, steps in steps_by_level.items()], "tiers from the levels' winners")
