"""Switches by outcome and their times, counted from history.jsonl and kept in switch-counts.json: what
/status `switches` and the control API's /metrics (kit_switch_*) show.

history.jsonl is the one source: the counts are kept with the history size they were counted up to (whole
lines only), and every read counts what the history gained past that size, so lines another process appended
are counted too and no counter ever goes down. Without a kept file, they come from the last
HISTORY_COUNT_BYTES of history.jsonl.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from launcher import atomic
from launcher.runtime.core.states import Outcome
from launcher.runtime.records import state as runtime_state
from launcher.state_layout import StatePaths

OTHER = "other"  # an outcome outside the vocabulary (also a metric label value outside its pattern)
# Outcomes of a switch as history.jsonl records them. `started` (serve's first healthy start of a plan)
# is not a switch; `unchanged` is never written to history. An unknown outcome string counts as "other".
SWITCH_OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome if o not in (Outcome.STARTED, Outcome.UNCHANGED))
# A switch takes seconds (the SIMULATED server) to most of an hour (a 1T-parameter load, health-gate up to 3600 s).
SWITCH_BUCKETS_S: tuple[float, ...] = (1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600)
HISTORY_COUNT_BYTES = 16 << 20  # how much of history.jsonl's end the switch counts are derived from at start
COUNTS_VERSION = 1  # switch-counts.json's shape
COUNTS_FILE_CAP = 64 << 10  # switch-counts.json's cap: ten outcomes, their buckets and sums, a few hundred bytes
THEN_COUNTS = "switch counts from history.jsonl alone"
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
