"""history.jsonl as /status and /metrics read it: its last entries, read again only when the file changed, and
the switch counts (records/switch_counts.py), kept in switch-counts.json as soon as they cover more of it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from launcher.runtime import log
from launcher.runtime.records import state as runtime_state
from launcher.runtime.records.history import Entry
from launcher.runtime.records.switch_counts import SwitchCounts
from launcher.state_layout import StatePaths

RETRY_BASELINE_S = 10.0  # an unreadable history is tried again at most this often (at scrape time)


class HistoryReads:
    """One state dir's history, as the lifecycle serves it to /status and /metrics."""

    def __init__(self, state_dir: Path):
        self.sd = state_dir
        self.path = StatePaths(state_dir).history
        # Switches by outcome (/status `switches`, /metrics kit_switch_*): switch-counts.json plus what
        # history.jsonl gained since (also lines another process appended while this one was down), kept at
        # once; then each entry this process appends. None while the history cannot be read (unknown, not 0).
        self.counts: SwitchCounts | None = SwitchCounts.from_history(state_dir)
        self.counts_tried = time.monotonic()
        self.keep_counts()
        self._cache: tuple[object, tuple[list[Entry], int]] | None = None

    def view(self) -> tuple[list[Entry], int]:
        """history.jsonl's last 20 entries and its skipped lines (state.read_history), read again only
        when the file changed (its inode, size, mtime), so /status and /metrics stay cheap."""
        try:
            st = os.stat(self.path)
            key: object = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
        except FileNotFoundError:
            key = "absent"
        except OSError:
            key = None  # cannot tell whether it changed: read it
        if key is None or self._cache is None or self._cache[0] != key:
            self._cache = (key, runtime_state.read_history(self.sd, 20))
        return self._cache[1]

    def counts_now(self) -> SwitchCounts | None:
        """The switch counts; a history that could not be read is tried again now and then (and kept once read)."""
        if self.counts is None and time.monotonic() - self.counts_tried >= RETRY_BASELINE_S:
            self.counts_tried = time.monotonic()
            self.counts = SwitchCounts.from_history(self.sd)
            self.keep_counts()
        return self.counts

    def recorded(self, entry: Entry) -> None:
        """`entry` was appended to history.jsonl: count what the history gained since the last read (that entry,
        and any line another process appended) from the file, the one source, never from memory, and keep the
        counts. A history that cannot be read now leaves them unknown until a retry reads it (counts_now)."""
        if self.counts is None:
            return  # the retry reads the kept counts plus the history, this entry included
        if not self.counts.catch_up(self.sd):
            self.counts, self.counts_tried = None, time.monotonic()
            return
        self.keep_counts()

    def keep_counts(self) -> None:
        """Keep the switch counts in switch-counts.json when they cover another part of history.jsonl than it
        says: a restart starts from them, so counters never go down, also when the history is replaced or
        outgrows the window before the next switch."""
        if self.counts is not None and self.counts.unsaved:
            try:
                self.counts.save(self.sd)
            except OSError:
                log.exception()  # the counts in memory stand; the next read tries to keep them again
