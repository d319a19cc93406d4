"""A tuned `--speculative-adaptive-config` as one typed record of a plan: per batch-size tier, the EAGLE-3
steps SGLang 0.5.23 may run there (0: a 0-step EAGLE pass, which is not plain decoding; below).

This module is the one definition of such a record for the kit: its type (`AdaptiveTiers`), its checks
(SGLang 0.5.23's own, plus the kit's: a starting step must exist), its text form `B:S,B:S` (several steps
of one tier as `B:S/S`), its JSON form `{"B": [S, ...]}` (the control API's `adaptive_tiers`, a profile's
`[adaptive_tiers]` table) and the file SGLang reads (`write`). `bench tune --adaptive` writes one from the
fastest static point at each concurrency level it measured (bench/tune/adaptive.py).

How SGLang 0.5.23 uses the file (srt/speculative/adaptive_spec_params.py):
* each integer-string key is a tier holding `candidate_steps`, a non-empty list of non-negative ints
  (`_load_adaptive_config`, :103-139); other keys are skipped;
* a batch is padded to the CUDA-graph batch size at or above it, then served by the largest tier at or
  below that size, the lowest tier when none is (`_route`, `_pad_to_cuda_graph_bs`, `_find_closest_bs`,
  :342-358). The sizes it pads to are `--cuda-graph-bs-decode` exactly as given, and none when that flag is
  unset (eagle_worker_v2.py:1408-1414 hands `get_exec().graph.cuda_graph_bs_decode`, the raw flag, to
  `init_states`, adaptive_runtime_state.py:103-105): the default capture list (cuda_graph_hook.py:500-532)
  and `--cuda-graph-max-bs-decode` pad nothing there. `Routing` is that path, and where a tier must be keyed;
* within a tier SGLang moves between its candidate steps from a moving average of the accept length
  (:153-272); a tier of one candidate never moves, so its steps are the tier's decision;
* 0 steps is no plain decode: the batch still runs a 1-node verify through the target-verify graph
  (eagle_worker_v2.py:1469-1472, 1678-1686) and the draft model's extend forward every step, unless
  SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND is set (:1491-1504; srt/environ.py:1574-1577), and the server keeps
  EAGLE's request cap (48 when --max-running-requests is unset, srt/arg_groups/speculative_hook.py:1086-1094).
  Speculation cannot be turned off inside one EAGLE server; `off` is another server (--spec off);
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
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator

from launcher import atomic
from launcher.errors import UserError
from launcher.profiles.spec_params import MAX_VALUE, SpecParams

FLAG = "--adaptive-tiers"
SPEC_MODE = "eagle3-adaptive"  # the spec mode (profiles/spec/eagle3-adaptive.toml) such a record runs under
FIELD = "adaptive_tiers"  # the control API's body key and the profile's table
# The largest tier key the kit accepts (a batch size). SGLang 0.5.23 sets none: `_load_adaptive_config` takes any
# key for which str.isdigit() holds and calls int() on it (adaptive_spec_params.py:117-131; a non-ASCII digit such as
# '²' or a 5000-digit key raises ValueError there), and a batch is padded only to a CUDA-graph batch size, whose
# decode default is at most 512 (srt/arg_groups/memory_hook.py:100-188) and otherwise --max-running-requests. 65536
# is far above any decode batch the kit's hosts reach, and keeps every key 5 digits at most.
MAX_BATCH = 65536
FLAG_HELP = ("under --spec eagle3-adaptive: per batch-size tier B the EAGLE-3 steps S (0: a 0-step EAGLE pass, "
             "still a 1-node verify and a draft extend, not plain decoding), replacing the overlay's config "
             "(e.g. 1:3,4:1,16:0; launcher/profiles/adaptive_tiers.py)")
FORM = (f"give tiers as B:S,B:S (batch size B from 1 to {MAX_BATCH}, EAGLE-3 steps S from 0 to {MAX_VALUE}, "
        "0 = a 0-step EAGLE pass, not plain decoding; several steps of one tier as B:S/S), e.g. 1:3,4:1,16:0")


@dataclass(frozen=True)
class AdaptiveTiers:
    """{batch size: candidate steps}, ordered by batch size, each tier's steps sorted and distinct."""

    tiers: tuple[tuple[int, tuple[int, ...]], ...]

    def __post_init__(self) -> None:
        problems = tier_problems(self.tiers)
        if problems:
            raise _refusal(FIELD, problems, JSON_FORM)

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
        the lowest (adaptive_spec_params.py:356-358; CUDA-graph padding, :348-354, is `Routing.steps_for`)."""
        chosen = self.tiers[0][1]
        for b, steps in self.tiers:
            if b <= batch:
                chosen = steps
        return chosen

    def start_point(self, widest: bool = False) -> SpecParams:
        """The point the server starts from: the lowest tier's smallest positive step, else the smallest positive
        step of any tier; top-k 1 and draft tokens steps + 1, as SGLang sets them (speculative_hook.py:1423-1427).

        `widest` (a plan that runs the PCIe-IPC all-reduce): the most steps any tier runs. SGLang sizes that
        all-reduce's workspace once, from the largest captured batch x the starting point's tokens
        (base_runner.py:350-390), and sends a wider verify to NCCL without a word (pcie_ipc_ar.py:402-403);
        starting from the widest tier's steps makes the workspace hold every tier's verify (rule
        `pcie_ipc_adaptive_tiers` checks it)."""
        if widest:
            steps = max(self.union())
        else:
            lowest = [s for s in self.tiers[0][1] if s > 0]
            steps = min(lowest) if lowest else min(s for s in self.union() if s > 0)
        return SpecParams(steps=steps, topk=1, draft_tokens=steps + 1)

    def path(self, folder: Path) -> Path:
        """Where the file lies in `folder` (the state dir's `adaptive`): named by its content."""
        return Path(folder) / f"{self.sha()}.json"

    def write(self, folder: Path) -> Path:
        """The file `folder/<sha>.json`, written atomically (0600, as the plan's files) unless it holds this content
        already (OSError as a state file's write, launcher/profiles/render.py)."""
        path = self.path(folder)
        text = self.file_text()
        if atomic.holds(path, text):
            return path
        return atomic.write_text(path, text, mode=0o600)


def tier_problems(tiers: object) -> list[str]:
    """What SGLang 0.5.23 or the kit refuses in a tiers record (empty: fine)."""
    if not isinstance(tiers, tuple) or not tiers:
        return ["no tier given"]
    out: list[str] = []
    seen: set[int] = set()
    for b, steps in tiers:
        if _batch(b) is None:
            out.append(f"tier {_shown(b)} is no batch size from 1 to {MAX_BATCH}")
        elif b in seen:
            out.append(f"tier {b} given twice")
        else:
            seen.add(b)
        if not _steps_ok(steps):
            out.append(f"tier {_shown(b)}: {STEPS_WORDS}")
    if not out and not any(s > 0 for _, steps in tiers for s in steps):
        out.append("every tier has 0 steps (0-step EAGLE passes everywhere): SGLang needs a starting step among "
                   "the candidates (speculative_hook.py:1416-1421), and no speculation at all is --spec off")
    return out


# ----- the one parser: the text form (--adaptive-tiers), a profile's [adaptive_tiers] table and the API's JSON ---------
# Each form is cut into (key, steps) as given; `_build` judges every pair the same way, so a key or a step is
# refused with the same words whichever form brought it. Nothing unbounded reaches int(): a key is ASCII digits
# of at most len(str(MAX_BATCH)) significant digits (a 5000-digit key would raise ValueError, Python's
# int-string limit), a step a strict int (no bool, str or float: as strict as [spec_params]).

STEPS_WORDS = f"candidate steps must be whole numbers from 0 to {MAX_VALUE}, at least one"
TEXT_FORM = FORM
JSON_FORM = (f'give tiers as {{"B": [S, ...]}} (batch size B an integer string from "1" to "{MAX_BATCH}", EAGLE-3 '
             f'steps S whole numbers from 0 to {MAX_VALUE}, 0 = a 0-step EAGLE pass), e.g. {{"1": [3], "4": [1], "16": [0]}}')
TOML_FORM = (f"give [adaptive_tiers] lines such as 1 = [3] (batch size from 1 to {MAX_BATCH}, EAGLE-3 steps whole "
             f"numbers from 0 to {MAX_VALUE}, 0 = a 0-step EAGLE pass)")
PROBLEMS_SHOWN = 3  # the problems one refusal lists; the rest are counted, so a refusal stays one short line
_DIGITS = len(str(MAX_BATCH))


def _shown(value: object) -> str:
    """A key or item as a refusal quotes it: an int as is, anything else quoted and cut at 20 characters."""
    if isinstance(value, int) and not isinstance(value, bool) and -10**20 < value < 10**20:
        return str(value)
    text = value if isinstance(value, str) else type(value).__name__
    return repr(text[:20]) + ("..." if len(text) > 20 else "")


def _batch(key: object) -> int | None:
    """A tier key as a batch size from 1 to MAX_BATCH: an int, or a string of ASCII digits; None otherwise."""
    if isinstance(key, str):
        if not (key.isascii() and key.isdigit()) or len(key.lstrip("0")) > _DIGITS:
            return None
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, int):
        return None
    return key if 1 <= key <= MAX_BATCH else None


def _step_ok(step: object) -> bool:
    return isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_VALUE


def _steps_ok(steps: object) -> bool:
    """SGLang's `candidate_steps`: a non-empty list of non-negative ints (adaptive_spec_params.py:121-130), each
    at most MAX_VALUE."""
    return isinstance(steps, (list, tuple)) and bool(steps) and all(_step_ok(s) for s in steps)


def _refusal(where: str, problems: list[str], form: str) -> UserError:
    more = len(problems) - PROBLEMS_SHOWN
    listed = "; ".join(problems[:PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return UserError(f"{where}: {listed}; {form}")


def _build(items: list[tuple[object, object]], where: str, form: str, problems: list[str] | None = None) -> AdaptiveTiers:
    """The record from (key, steps) pairs as given; UserError naming `where`, every problem (the first few) and
    `form`, the fix in the caller's form."""
    problems = list(problems or [])
    pairs: list[tuple[int, tuple[int, ...]]] = []
    for key, steps in items:
        b = _batch(key)
        if b is None:
            problems.append(f"tier {_shown(key)} is no batch size from 1 to {MAX_BATCH}")
        if not _steps_ok(steps):
            problems.append(f"tier {_shown(key) if b is None else b}: {STEPS_WORDS}")
        elif b is not None:
            pairs.append((b, tuple(sorted(set(steps)))))  # type: ignore[arg-type]
    if not problems:
        problems = tier_problems(tuple(sorted(pairs)))
    if problems:
        raise _refusal(where, problems, form)
    return AdaptiveTiers(tuple(sorted(pairs)))


def make_tiers(pairs: list[tuple[int, list[int]]], where: str) -> AdaptiveTiers:
    """The record from (batch, steps) pairs the kit computed (tiers by batch size, steps sorted and distinct)."""
    return _build(list(pairs), where, TEXT_FORM)


def _text_step(token: str) -> int | str:
    token = token.strip()
    if token.isascii() and token.isdigit() and len(token.lstrip("0")) <= len(str(MAX_VALUE)):
        return int(token)
    return token  # refused by _steps_ok, in the same words as a JSON step that is no whole number


def parse(text: str, flag: str = FLAG) -> AdaptiveTiers:
    """`B:S,B:S/S` -> AdaptiveTiers; UserError naming the flag otherwise."""
    text = str(text)
    where = f"{flag} {_shown(text) if len(text) > 20 else repr(text)}"
    items: list[tuple[object, object]] = []
    problems: list[str] = []
    for item in (t.strip() for t in text.split(",")) if text.strip() else ():
        b, sep, steps = item.partition(":")
        if not sep:
            problems.append(f"item {_shown(item)} is not B:S")
            continue
        items.append((b.strip(), [_text_step(p) for p in steps.split("/")]))
    if not items and not problems:
        problems.append("no tier given")
    return _build(items, where, TEXT_FORM, problems)


def from_json(value: object, where: str = FIELD, form: str = JSON_FORM) -> AdaptiveTiers:
    """`{"1": [3], "4": [1]}` (the API's body, a profile table) -> AdaptiveTiers; UserError naming `where`.
    Strict: a key is an integer string of ASCII digits, a step an int (never a bool, a string or a float)."""
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: must be an object of tiers (a table in TOML), not {type(value).__name__}; {form}")
    if not value:
        raise _refusal(where, ["no tier given"], form)
    return _build(list(value.items()), where, form)


def coerce(value: AdaptiveTiers | Mapping | str | None, where: str = FIELD) -> AdaptiveTiers | None:
    """A record from what a caller holds: the record, a JSON mapping or `B:S,...` text."""
    if value is None or isinstance(value, AdaptiveTiers):
        return value
    if isinstance(value, str):
        return parse(value, where)
    return from_json(value, where)


def api_value(value: object) -> AdaptiveTiers | None:
    """The control API's `adaptive_tiers` exactly as the JSON body holds it -> the record (None: none); UserError
    (the API's 400) in the words the CLI and a profile get. `ApiTiers` is the body field's type."""
    if value is None or isinstance(value, AdaptiveTiers):
        return value
    return from_json(value, FIELD, JSON_FORM)


# The type of the control API's `adaptive_tiers` body field: the raw JSON goes to `api_value` (no lax
# coercion of "3", true or 1.0 first); pydantic passes its UserError through model_validate untouched.
ApiTiers = Annotated[AdaptiveTiers | None, PlainValidator(api_value)]


def stored_value(value: object) -> AdaptiveTiers | None:
    """A stored plan's or history label's `adaptive_tiers` (`{"B": [steps]}`) -> the record (None: none); ValueError,
    which pydantic reports as its ValidationError, when damaged: readers of stored records catch that."""
    try:
        return api_value(value)
    except UserError as exc:
        raise ValueError(str(exc)) from None


# The type of `adaptive_tiers` in a Plan and a history Label: the record in memory, `{"B": [steps]}` in JSON.
PlanTiers = Annotated[AdaptiveTiers | None, PlainValidator(stored_value),
                      PlainSerializer(lambda tiers: None if tiers is None else tiers.to_json())]
