"""The server log's start records, kept where log rotation cannot lose them.

supervisord rotates the server log at 50 MB. `Follower` reads the log incrementally from the last
start line (start_lines.START_MARKER) through start_lines.Scanner and keeps one record per start in
`$KIT_STATE_DIR/starts/<start>.json` (activation.py, point 3, says why it runs in the control API).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from launcher import atomic
from launcher.runtime.records import state as runtime_state
from launcher.runtime.start_lines import START_MARKER, Scanner, cause_text

RECORD_MODE = 0o600
KEEP_RECORDS = 32  # start records kept in the state dir
POLL_BUDGET = 32 << 20  # bytes one poll reads at most; the next poll goes on
MAX_LINE = 1 << 20  # a longer line is cut (counted as whole lines never are)
BACKUPS = 5  # supervisor_conf: stdout_logfile_backups
MAX_LOG_FILE = 64 << 20  # a log file read whole at start: supervisord rotates at 50 MB; a larger one is skipped
RECORD_CAP = 4 << 20  # a start record's cap (state.load): its activation lines and causes are KiBs


class Follower:
    """Reads the server log as it grows (across supervisord's rotation) and keeps one record per server
    start in `records_dir`. Thread-safe: the monitor and a switch both poll it."""

    def __init__(self, log: Path, records_dir: Path):
        self.log = Path(log)
        self.dir = Path(records_dir)
        self.lock = threading.Lock()
        self.version = 0  # bumped whenever a record changes
        self.starts = 0  # start lines seen since this process began following
        self.records: list[dict] = []
        self._inode: int | None = None
        self._offset = 0
        self._carry = b""
        self._booted = False
        self.scanner = Scanner(on_start=self._started, on_change=self._save)

    # -- reading --
    def poll(self, budget: int = POLL_BUDGET) -> bool:
        """Read what the log gained since the last poll (at most `budget` bytes); True when more is left."""
        with self.lock:
            if not self._booted:
                self._booted = True
                self._boot()
            return self._read(budget)

    def catch_up(self) -> None:
        while self.poll():
            pass

    def _files(self) -> list[Path]:
        return [self.log] + [self.log.with_name(f"{self.log.name}.{i}") for i in range(1, BACKUPS + 1)]

    def _boot(self) -> None:
        """Start from the last start line in the log or its backups; without one, from the records kept."""
        marker = START_MARKER.encode()
        files = self._files()
        for i, path in enumerate(files):
            try:
                data = atomic.read_capped(path, MAX_LOG_FILE)
            except OSError:  # absent, no regular file (never followed, never blocking), or too large
                continue
            at = data.rfind(marker)
            if at < 0:
                continue
            at = data.rfind(b"\n", 0, at) + 1
            for j in range(i, 0, -1):  # this backup from the start line on, then the newer ones
                try:
                    chunk = data[at:] if j == i else atomic.read_capped(files[j], MAX_LOG_FILE)
                except OSError:
                    continue
                self._feed(chunk)
                at = 0
            if i == 0:
                self._set_current(at)
                self._feed(data[at:])
                self._offset = at + len(data[at:])
            else:
                self._set_current(0)
            return
        self._load_latest()
        self._set_current(0)

    def _set_current(self, offset: int) -> None:
        try:
            self._inode = os.stat(self.log).st_ino
        except OSError:
            self._inode = None
        self._offset = offset

    def _read(self, budget: int) -> bool:
        try:
            st = os.stat(self.log)
        except OSError:
            return False
        if self._inode is not None and st.st_ino != self._inode:
            self._finish_rotated(self._inode)
            self._inode, self._offset = st.st_ino, 0
        self._inode = st.st_ino
        if st.st_size < self._offset:  # truncated in place
            self._offset = 0
        if st.st_size == self._offset:
            return False
        try:
            fd = atomic.open_regular(self.log)
            try:
                data = os.pread(fd, budget, self._offset)
            finally:
                os.close(fd)
        except OSError:
            return False
        self._offset += len(data)
        self._feed(data)
        return self._offset < st.st_size

    def _finish_rotated(self, inode: int) -> None:
        """The log was renamed: read the rest of the file we followed from where we were."""
        for path in self._files()[1:]:
            try:
                if os.stat(path).st_ino != inode:
                    continue
                with os.fdopen(atomic.open_regular(path), "rb") as fh:
                    fh.seek(self._offset)
                    while chunk := fh.read(POLL_BUDGET):
                        self._feed(chunk)
            except OSError:
                continue
            return

    def _feed(self, data: bytes) -> None:
        data = self._carry + data
        cut = data.rfind(b"\n") + 1
        self._carry = data[cut:]
        if len(self._carry) > MAX_LINE:
            self._carry = b""
        if cut:
            self.scanner.feed(data[:cut].decode("utf-8", "replace"))

    # -- records --
    def _started(self, record: dict) -> None:
        self.starts += 1
        self.records = [*self.records[-(KEEP_RECORDS - 1):], record]
        self._save(record)

    def _save(self, record: dict | None) -> None:
        self.version += 1
        if record is None or not record.get("start"):
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic.write_json(self.dir / f"{record['start']}.json", record, mode=RECORD_MODE)
            kept = sorted(self.dir.glob("*.json"))
            for old in kept[:-KEEP_RECORDS]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # the record stays in memory; /status keeps working

    def _load_latest(self) -> None:
        for path in sorted(self.dir.glob("*.json"), reverse=True)[:1]:
            record = runtime_state.read_json(path, RECORD_CAP, then="no start record kept")
            if record is not None and isinstance(record.get("seen"), dict):
                self.records = [record]
                self.scanner.record = record

    def record_for(self, pid: int) -> dict | None:
        """The record of the start that server_exec `pid` made (the last one, if pid is 0)."""
        with self.lock:
            if not pid:
                return self.records[-1] if self.records else None
            mine = [r for r in self.records if r.get("pid") == pid]
            if mine:
                return mine[-1]
        for path in sorted(self.dir.glob(f"*-{int(pid)}.json"), reverse=True):
            record = runtime_state.read_json(path, RECORD_CAP, then="no start record kept")
            if record is not None:
                return record
        return None

    def cause_since(self, starts_before: int) -> str | None:
        """Why the newest server started after `starts_before` start lines died, from its log."""
        with self.lock:
            if self.starts <= starts_before or not self.records:
                return None
            return cause_text(self.records[-1])

