"""The control API's own /metrics (Prometheus text format): the numbers /status shows, read from the
same place at scrape time.

One source: `Lifecycle` keeps the state, the restart counts, the health reading, the backend verdicts
and the switch counts (`SwitchCounts`); /status and `KitCollector` both read them, so the two can never
disagree. The switch counts survive a control API restart and never go down. history.jsonl is their one
source: they are kept in switch-counts.json with the history size they were counted up to (whole lines
only), and every read of the history (the control API's start, the retry of an unreadable one, each entry
the control API appends) counts what it gained past that size, then keeps the counts at once, so lines
another process appended are kept too. Without a kept file, they come from the last HISTORY_COUNT_BYTES
of history.jsonl.

What a scrape may show is bounded: names that follow the profile-name pattern, 16-hex digests, fixed
vocabularies (states, outcomes, restart reasons); anything else reads "other". Never a token, a
profile's env value, a model path or an error text. A series whose value is not known (no plan, no
health reading yet, a backend whose verdict is unknown, a history that cannot be read) is absent,
never a made-up 0; a family that fails to build is left out with its traceback in the log, so a
scrape always answers 200 with what is known.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from launcher import __version__, atomic
from launcher.profiles.policy import NAME_PATTERN
from launcher.runtime import log
from launcher.runtime.core.states import Outcome, State
from launcher.runtime.records import state as runtime_state
from launcher.state_layout import StatePaths

if TYPE_CHECKING:
    from launcher.profiles.plan import Plan

OTHER = "other"  # a label value outside its pattern or vocabulary
UNKNOWN = "unknown"  # a build fact this process cannot tell
NAME_RE = re.compile(NAME_PATTERN)
DIGEST_RE = re.compile(r"[0-9a-f]{16}")  # Plan.digest(): 16 hex characters
VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}")
PATCH_SET_RE = re.compile(r"[0-9a-f]{64}")
PATCH_SET_SHOWN = 12  # hex characters of the patch set's sha256 shown in kit_build_info

# The image writes the patch set's sha256 here at build (Dockerfile; also its label
# pcie-spec-kit.patches.sha256); outside the image there is none.
IMAGE_PATCH_SET_FILE = Path("/opt/kit/patches.sha256")

# Outcomes of a switch as history.jsonl records them. `started` (serve's first healthy start of a plan)
# is not a switch; `unchanged` is never written to history. An unknown outcome string counts as "other".
SWITCH_OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome if o not in (Outcome.STARTED, Outcome.UNCHANGED))
# A switch takes seconds (the SIMULATED server) to most of an hour (a 1T-parameter load, health-gate up to 3600 s).
SWITCH_BUCKETS_S: tuple[float, ...] = (1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600)
HISTORY_COUNT_BYTES = 16 << 20  # how much of history.jsonl's end the switch counts are derived from at start
COUNTS_VERSION = 1  # switch-counts.json's shape
COUNTS_FILE_CAP = 64 << 10  # switch-counts.json's cap: ten outcomes, their buckets and sums, a few hundred bytes
THEN_COUNTS = "switch counts from history.jsonl alone"
RETRY_BASELINE_S = 10.0  # an unreadable history is tried again at most this often (at scrape time)

RESTART_CRASH = "crash"  # the server died and supervisord restarted it (/status `restarts`)
RESTART_RETRY = "retry"  # the control API restarted it after supervisord gave up (FATAL; /status `retry.attempts`)


def bounded(value: object, pattern: re.Pattern[str]) -> str:
    """A label value: `value` when it is a string that fully matches `pattern`, else "other"."""
    return value if isinstance(value, str) and pattern.fullmatch(value) else OTHER


# ----- switch counts ---------------------------------------------------------------------------------
COUNTED_LABELS: frozenset[str] = frozenset((*SWITCH_OUTCOMES, OTHER))  # the only outcome keys a kept file may hold


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


@dataclass
class SwitchCounts:
    """Switches by outcome and a histogram of their total time, from history.jsonl's lines.

    `offset`: the bytes of history.jsonl counted (always the end of a whole line: a last line without its
    line break yet is left for the next read). `saved_offset`: the one switch-counts.json holds (0: none).
    `truncated`: history.jsonl was longer than the window read, so older entries are not counted.
    `skipped`: lines read that were not a JSON object (not counted either)."""

    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SWITCH_OUTCOMES, 0))
    buckets: dict[str, list[int]] = field(  # per outcome: count per bucket (the last: +Inf)
        default_factory=lambda: {o: [0] * (len(SWITCH_BUCKETS_S) + 1) for o in SWITCH_OUTCOMES})
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SWITCH_OUTCOMES, 0.0))
    truncated: bool = False
    skipped: int = 0
    offset: int = 0
    saved_offset: int = 0

    def observe(self, entry: dict) -> None:
        """Count one history entry (anything that is not a switch is ignored)."""
        outcome = entry.get("outcome")
        if outcome in (Outcome.STARTED, Outcome.UNCHANGED):
            return
        label = outcome if outcome in SWITCH_OUTCOMES else OTHER
        self.totals[label] = self.totals.get(label, 0) + 1
        durations = entry.get("durations")
        total = durations.get("total_s") if isinstance(durations, dict) else None
        if isinstance(total, bool) or not isinstance(total, int | float) or not math.isfinite(total) or total < 0:
            return  # a switch without a readable total time is counted, but not timed
        counts = self.buckets.setdefault(label, [0] * (len(SWITCH_BUCKETS_S) + 1))
        counts[next((i for i, b in enumerate(SWITCH_BUCKETS_S) if total <= b), len(SWITCH_BUCKETS_S))] += 1
        self.sums[label] = self.sums.get(label, 0.0) + float(total)

    def as_status(self) -> dict:
        return {"outcomes": dict(self.totals), "history_truncated": self.truncated}

    @property
    def unsaved(self) -> bool:
        """Whether history.jsonl was read past (or, replaced, behind) what switch-counts.json covers."""
        return self.offset != self.saved_offset

    def catch_up(self, sd: Path, max_bytes: int = HISTORY_COUNT_BYTES) -> bool:
        """Count the whole lines history.jsonl gained past `offset`, and move `offset` to their end. The history
        file is the one source: an entry this process appended is counted here, as one another process appended.
        A history shorter than `offset` was replaced: all of it is new, counted on top. More than `max_bytes`
        gained: only the last `max_bytes` are counted (`truncated`). No history: nothing to count (`offset` 0,
        so one created later is counted from its start). False, counts untouched, when it cannot be read (not a
        regular file, no permission; atomic.open_regular: a link is never followed, a FIFO never hangs)."""
        path = StatePaths(sd).history
        try:
            fd = atomic.open_regular(path)  # never a link followed, never a FIFO blocked on
        except FileNotFoundError:
            self.offset = 0
            return True
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            start = self.offset if self.offset <= st.st_size else 0  # shorter: a replaced history
            mid_line = st.st_size - start > max_bytes
            if mid_line:
                start = st.st_size - max_bytes
            data = os.pread(fd, st.st_size - start, start)
        except OSError:
            return False
        finally:
            os.close(fd)
        whole = data.rfind(b"\n") + 1  # a last line without its line break yet is counted once it has one
        lines = data[:whole].split(b"\n")[:-1]
        if mid_line:
            self.truncated = True
            lines = lines[1:]  # the window may start mid-line
        for raw in lines:
            if not raw.strip():
                continue
            try:
                entry = runtime_state.parse_json(raw)
            except ValueError:
                self.skipped += 1
                continue
            if isinstance(entry, dict):
                self.observe(entry)
            else:
                self.skipped += 1
        self.offset = start + whole
        return True

    def save(self, sd: Path) -> None:
        """Keep the counts beside history.jsonl with the history size they cover, `offset`: what was counted,
        never the file's size now, so a line appended since is counted by the next read (switch-counts.json,
        atomic). A restart reads them and counts only what was appended since, so no counter ever goes down (a
        history longer than the window read would otherwise lose its oldest switches)."""
        atomic.write_json(StatePaths(sd).switch_counts,
                          {"v": COUNTS_VERSION, "history_bytes": self.offset, "totals": self.totals,
                           "buckets": self.buckets, "sums": self.sums, "truncated": self.truncated,
                           "skipped": self.skipped}, mode=0o600)
        self.saved_offset = self.offset

    @classmethod
    def saved(cls, sd: Path) -> SwitchCounts | None:
        """The kept counts, `offset` the history size they cover; None when absent, unreadable or not of the
        right shape (a damaged or foreign file is not trusted: the counts then come from the history alone)."""
        path = StatePaths(sd).switch_counts
        try:
            data = runtime_state.load(path, None, COUNTS_FILE_CAP)  # a regular file of bounded size, strict JSON
            if data is None:
                return None
            if not isinstance(data, dict) or data.get("v") != COUNTS_VERSION:
                raise runtime_state.Damaged(path, f"not switch counts of version {COUNTS_VERSION}")
            totals, buckets, sums = data["totals"], data["buckets"], data["sums"]
            size, skipped, truncated = data["history_bytes"], data.get("skipped", 0), data.get("truncated", False)
            if not (isinstance(totals, dict) and isinstance(buckets, dict) and isinstance(sums, dict)
                    and _count(size) and _count(skipped) and isinstance(truncated, bool)
                    and set(totals) | set(buckets) | set(sums) <= COUNTED_LABELS
                    and all(_count(v) for v in totals.values())
                    and all(isinstance(v, list) and len(v) == len(SWITCH_BUCKETS_S) + 1 and all(map(_count, v))
                            for v in buckets.values())
                    and all(not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0
                            for v in sums.values())):
                raise runtime_state.Damaged(path, "a field out of the switch counts' shape (outcomes, counts, sums)")
        except KeyError as exc:
            runtime_state.report(runtime_state.Damaged(path, f"no key {exc}"), THEN_COUNTS)
            return None
        except runtime_state.Damaged as exc:
            runtime_state.report(exc, THEN_COUNTS)
            return None
        out = cls(truncated=truncated, skipped=skipped, offset=size, saved_offset=size)
        out.totals.update(totals)
        out.buckets.update(buckets)
        out.sums.update({k: float(v) for k, v in sums.items()})
        return out

    @classmethod
    def from_history(cls, sd: Path, max_bytes: int = HISTORY_COUNT_BYTES) -> SwitchCounts | None:
        """The kept counts (switch-counts.json) plus what history.jsonl gained since; without them, counts from
        the end of history.jsonl. Empty when there is no history yet, None when it cannot be read (not a regular
        file, no permission): the counts are then unknown, not 0. `unsaved` says whether to keep them now."""
        out = cls.saved(sd) or cls()
        return out if out.catch_up(sd, max_bytes) else None




# ----- build facts -----------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def build_info() -> dict[str, str]:
    """Kit version, the installed SGLang's version (from its metadata: nothing is imported) and the
    image's patch set (the first PATCH_SET_SHOWN hex characters of its sha256); "unknown" where not known."""
    try:
        sglang = bounded(importlib.metadata.version("sglang"), VERSION_RE)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        sglang = UNKNOWN
    patch_set = UNKNOWN
    try:
        text = atomic.read_capped(IMAGE_PATCH_SET_FILE, 128).decode("ascii", "replace").strip()
        if PATCH_SET_RE.fullmatch(text):
            patch_set = text[:PATCH_SET_SHOWN]
    except OSError:
        pass
    return {"version": bounded(__version__, VERSION_RE), "sglang": sglang, "patch_set": patch_set}


# ----- the collector ---------------------------------------------------------------------------------
def _plan_spec_labels(plan: object) -> dict[str, str] | None:
    """steps/topk/draft_tokens of the plan's EAGLE point where Plan carries one ("none" for a plan
    without a point: off, ngram), so the label set stays the same across switches."""
    if not hasattr(plan, "spec_params"):
        return None
    params = getattr(plan, "spec_params", None)
    out = {}
    for key in ("steps", "topk", "draft_tokens"):
        value = params.get(key) if isinstance(params, dict) else getattr(params, key, None)
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6
        out[key] = str(value) if ok else "none" if value is None else OTHER
    return out


class _SwitchTimes(Protocol):
    server_changed_at: float


class LifecycleView(Protocol):
    """What the collector reads of the lifecycle (launcher/runtime/lifecycle.py `Lifecycle`), which imports
    this module for its switch counts: the collector names the reads, not the class."""

    current: Plan | None
    state: str
    backends: list[dict]
    restarts: int
    switcher: _SwitchTimes

    @property
    def retries(self) -> int: ...

    def switch_counts_now(self) -> SwitchCounts | None: ...

    def health_age_s(self) -> float | None: ...

    def history_view(self) -> tuple[list[Any], int]: ...

    def spec_adaptive(self) -> dict | None: ...


class KitCollector(Collector):
    """Reads the Lifecycle at scrape time. Every family is built on its own: one that fails is left
    out (traceback to the log), the others are still served."""

    def __init__(self, lc: LifecycleView):
        self.lc = lc

    def collect(self) -> Iterable[Metric]:
        builders: tuple[Callable[[], list[Metric]], ...] = (
            self._build, self._plan, self._state, self._switches, self._backends, self._restarts,
            self._health, self._history, self._server_changed, self._spec_adaptive,
        )
        for build in builders:
            try:
                families = build()
            except Exception:
                log.exception()
                continue
            yield from families

    def _build(self) -> list[Metric]:
        info = build_info()
        g = GaugeMetricFamily("kit_build_info", "The kit's version, the installed SGLang's and the image's patch set "
                              "(first 12 hex characters of its sha256); always 1.", labels=["version", "sglang", "patch_set"])
        g.add_metric([info["version"], info["sglang"], info["patch_set"]], 1)
        return [g]

    def _plan(self) -> list[Metric]:
        plan = self.lc.current
        if plan is None:
            return []  # no readable plan: absent
        labels = {"profile": bounded(plan.name, NAME_RE), "spec": bounded(plan.spec, NAME_RE),
                  "digest": bounded(plan.digest(), DIGEST_RE)}
        labels.update(_plan_spec_labels(plan) or {})
        g = GaugeMetricFamily("kit_plan_info", "The running plan (as /status shows it); 1.", labels=list(labels))
        g.add_metric(list(labels.values()), 1)
        return [g]

    def _state(self) -> list[Metric]:
        now = State(self.lc.state)
        g = GaugeMetricFamily("kit_server_state", "1 for the state /status shows, 0 for every other.", labels=["state"])
        for s in State:
            g.add_metric([s.value], 1 if s == now else 0)
        return [g]

    def _switches(self) -> list[Metric]:
        counts = self.lc.switch_counts_now()
        if counts is None:
            return []  # history.jsonl unreadable: the counts are unknown
        total = CounterMetricFamily("kit_switch", "Switches by outcome, from history.jsonl (at control API start) "
                                    "and every switch since.", labels=["outcome"])
        for outcome, n in counts.totals.items():
            total.add_metric([outcome], n)
        hist = HistogramMetricFamily("kit_switch_duration_seconds", "Total time of a switch, by outcome.",
                                     labels=["outcome"])
        for outcome, per_bucket in counts.buckets.items():
            cumulative, acc = [], 0
            for bound, n in zip([*SWITCH_BUCKETS_S, math.inf], per_bucket, strict=True):
                acc += n
                cumulative.append((_le(bound), acc))
            hist.add_metric([outcome], cumulative, counts.sums.get(outcome, 0.0))
        return [total, hist]

    def _backends(self) -> list[Metric]:
        g = GaugeMetricFamily("kit_backend_active", "1 when an expected backend of the running plan is proven "
                              "active, 0 when not; absent while its verdict is unknown.", labels=["backend"])
        for b in list(self.lc.backends):
            active = b.get("active") if isinstance(b, dict) else None
            if isinstance(active, bool):
                g.add_metric([bounded(b.get("name"), NAME_RE)], 1 if active else 0)
        return [g]

    def _restarts(self) -> list[Metric]:
        c = CounterMetricFamily("kit_server_restarts", "Unplanned server restarts since the control API started: "
                                "crash (supervisord restarted it), retry (restarted after supervisord gave up).",
                                labels=["reason"])
        c.add_metric([RESTART_CRASH], self.lc.restarts)
        c.add_metric([RESTART_RETRY], self.lc.retries)
        return [c]

    def _health(self) -> list[Metric]:
        age = self.lc.health_age_s()
        if age is None:
            return []
        g = GaugeMetricFamily("kit_health_age_seconds", "Seconds since the server's /health was last probed.")
        g.add_metric([], age)
        return [g]

    def _history(self) -> list[Metric]:
        _, skipped = self.lc.history_view()
        g = GaugeMetricFamily("kit_history_skipped_lines", "Broken lines in the tail of history.jsonl that "
                              "/status reads (its history_skipped).")
        g.add_metric([], skipped)
        return [g]

    def _server_changed(self) -> list[Metric]:
        g = GaugeMetricFamily("kit_server_changed_timestamp_seconds", "Unix time this control API last stopped or "
                              "started the server (a switch or a rollback); absent until it has.")
        at = self.lc.switcher.server_changed_at
        if isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at) and at > 0:
            g.add_metric([], float(at))
        return [g]

    def _spec_adaptive(self) -> list[Metric]:
        """SGLang's adaptive EAGLE (--speculative-adaptive), from its log lines; absent unless the running plan
        asks for it and SGLang logged that the controller runs."""
        state = self.lc.spec_adaptive()
        if not state or state.get("active") is not True:
            return []
        out: list[Metric] = []
        steps = state.get("steps")
        if isinstance(steps, int) and not isinstance(steps, bool):
            g = GaugeMetricFamily("kit_spec_adaptive_steps", "EAGLE draft steps SGLang's adaptive controller last "
                                  "moved to (its change line names no batch-size tier); before any change, the "
                                  "first tier's starting steps. 0: a 0-step EAGLE pass (a 1-node verify), not plain decoding.")
            g.add_metric([], steps)
            out.append(g)
        c = CounterMetricFamily("kit_spec_adaptive_step_changes", "Changes of the EAGLE draft steps SGLang's "
                                "adaptive controller logged since the server started.")
        c.add_metric([], int(state.get("changes") or 0))
        out.append(c)
        ema = (state.get("last_change") or {}).get("ema_accept_len")
        if isinstance(ema, int | float) and not isinstance(ema, bool) and math.isfinite(ema):
            e = GaugeMetricFamily("kit_spec_adaptive_ema_accept_length", "The moving average of accepted draft "
                                  "tokens per verify that SGLang's last step change was decided on.")
            e.add_metric([], float(ema))
            out.append(e)
        return out


def _le(bound: float) -> str:
    if math.isinf(bound):
        return "+Inf"
    return f"{float(bound)}"
