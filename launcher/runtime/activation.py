"""Is the backend a profile asked for really running, and which one carries the decode all-reduce?

Every non-NCCL path in SGLang 0.5.23 except MSCCL++ falls back to NCCL with no more than a log warning
(MSCCL++ raises instead and the server dies, `pymscclpp.py:1110-1115`), so a healthy server proves
nothing about which all-reduce it runs. Three things decide it (sources in docs/evidence.md,
"Activation lines" and "Activation verdicts"):

1. **the line SGLang logs once the backend's workspace exists, on every rank.** TP workers prefix
   each line with their ranks (`[time DPn PPn TPn EPn] message`, `managers/scheduler.py:6279-6298`,
   `utils/common.py:2630`). A backend that came up on some ranks only is `failed`: those ranks run
   other collectives than their peers. The evidence names the missing ranks.
2. **SGLang's per-call precedence** (`distributed/parallel_state.py:745-780`, `:951-993`): the
   FlashInfer fusion workspace, then MSCCL++ (inside CUDA-graph capture), then the custom all-reduce
   `ca`, then PCIe-IPC, then NCCL. A workspace that exists proves nothing when a backend ahead of it
   is on: at TP 2 `ca` takes every decode reduction (`custom_all_reduce.py:272`) while PCIe-IPC
   still builds its workspace for the first reduction too big for `ca`. `ca` is on unless
   `--disable-custom-all-reduce`; it turns itself off (with a warning, on every rank) at world sizes
   other than 2/4/6/8, above 2 PCIe-only GPUs, or without P2P (`custom_all_reduce_utils.py:466-510`).
   Where neither that warning nor the host facts (KIT_HOST_FACTS) tell, the verdict is unknown.
3. **what the server's start proved, kept where log rotation cannot lose it.** supervisord rotates
   the server log at 50 MB. `Follower` reads the log incrementally from the last start line
   (server_exec.START_MARKER) and keeps, per start, each matched line and the ranks that logged it in
   `$KIT_STATE_DIR/starts/<start>.json`. It runs in the control API (its monitor polls it every
   period, a switch polls it before it judges): outside the server's output path, so a slow or
   failed follower can never block or kill the server, as a tee in server_exec could; it follows
   rotation by inode into the renamed file. A control API that was down while the log rotated away
   the start finds the record it wrote before.

`active` is True (up on every rank, nothing ahead of it), False (missing, given up, up on some
ranks only, or something ahead carries the reductions), or None (cannot be known).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from launcher import atomic

UPSTREAM = "https://github.com/sgl-project/sglang/blob/v0.5.23/python/"
RECORD_MODE = 0o600
KEEP_RECORDS = 32  # start records kept in the state dir
POLL_BUDGET = 32 << 20  # bytes one poll reads at most; the next poll goes on
MAX_LINE = 1 << 20  # a longer line is cut (counted as whole lines never are)
BACKUPS = 5  # supervisor_conf: stdout_logfile_backups
EXCEPTION_WINDOW = 400  # lines after a cause line searched for the traceback's exception line


@dataclass(frozen=True)
class Detector:
    name: str
    line: str | None  # what SGLang logs on each rank when the backend is up; None: it logs nothing that tells
    source: str  # where SGLang 0.5.23 logs it (file:line in the wheel)
    fallbacks: tuple[tuple[str, str], ...] = ()  # (what it logs when it gives the backend up, where)
    caveats: tuple[str, ...] = ()  # what it logs when some reductions skip a backend that is up
    unknown_reason: str = ""


FUSION_SRC = "sglang/srt/layers/flashinfer_comm_fusion.py"
IPC_SRC = "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py"
MSCCLPP_SRC = "sglang/srt/distributed/device_communicators/pymscclpp.py"
CA_SRC = "sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py"
PS_SRC = "sglang/srt/distributed/parallel_state.py"

DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "fusion",
            "FlashInfer AllReduce Fusion enabled and workspace initialized",
            f"{FUSION_SRC}:580",
            fallbacks=(
                ("FlashInfer workspace preflight probe failed", f"{FUSION_SRC}:368"),
                ("FlashInfer workspace preflight: cuMemCreate probe failed", f"{FUSION_SRC}:387"),
                ("Disabling flashinfer allreduce fusion permanently", f"{FUSION_SRC}:594"),
                ("FlashInfer AllReduce fusion disabled", f"{FUSION_SRC}:500"),
                ("FlashInfer allreduce fusion disabled globally", f"{FUSION_SRC}:737"),
                ("FlashInfer comm not available, skipping workspace initialization", f"{FUSION_SRC}:475"),
            ),
        ),
        Detector(
            "pcie-ipc",
            "FlashInfer PCIe-IPC workspace built",
            f"{IPC_SRC}:299",
            fallbacks=(
                ("reductions stay on NCCL", f"{IPC_SRC}:287"),
                ("no pcie_ipc_comm; falling back to NCCL all-reduce", f"{IPC_SRC}:227"),
                ("Deterministic inference is on; leaving PCIe-IPC all-reduce off", f"{IPC_SRC}:91"),
                ("Setup FlashInfer PCIe-IPC allreduce failed", f"{PS_SRC}:501"),
            ),
            caveats=("serves bf16 only",),
        ),
        Detector(
            "mscclpp",
            "Created MSCCL++ communicator",
            f"{MSCCLPP_SRC}:1123",
            fallbacks=(
                ("PyMscclpp is unavailable", f"{MSCCLPP_SRC}:1053"),
                ("PyMscclpp is disabled", f"{MSCCLPP_SRC}:1077"),
                ("PyMscclpp did not produce any usable tuned configurations", f"{MSCCLPP_SRC}:1120"),
            ),
        ),
        Detector(
            "deepep",
            None,
            "sglang/srt/layers/moe/token_dispatcher/deepep.py:304",
            unknown_reason="SGLang 0.5.23 logs no line when it creates the DeepEP buffer; "
            "check the a2a kernels in a trace (bench trace)",
        ),
    )
}
KNOWN: tuple[str, ...] = tuple(DETECTORS)

CA_OFF: tuple[tuple[str, str], ...] = (  # SGLang's custom all-reduce turned itself off (legacy class decides)
    ("CustomAllreduce is disabled", f"{CA_SRC}:466-510"),
    ("Setup Custom allreduce failed", f"{PS_SRC}:514"),
)
CAUSES: tuple[tuple[str, str], ...] = (  # why a server died at start-up, most specific first
    ("Failed to initialize MSCCL++ collectives", f"{MSCCLPP_SRC}:1114"),
    ("Scheduler hit an exception", "sglang/srt/managers/scheduler.py:6372"),
)
NEEDLES: tuple[str, ...] = tuple(
    [d.line for d in DETECTORS.values() if d.line]
    + [f for d in DETECTORS.values() for f, _ in d.fallbacks]
    + [c for d in DETECTORS.values() for c in d.caveats]
    + [n for n, _ in CA_OFF]
    + [n for n, _ in CAUSES]
)
# Cheap substrings that every needle line contains: the log is searched for these, the hits' lines
# for the needles (a chatty server writes tens of MB; one search per key keeps that well under a second).
# Every line SGLang logs with a needle in it holds one of these (tests/test_runtime_activation.py checks).
KEYS: tuple[str, ...] = ("FlashInfer", "flashinfer", "PCIe-IPC", "pcie_ipc_comm", "MSCCL++", "PyMscclpp",
                         "CustomAllreduce", "Custom allreduce", "Scheduler hit an exception")

RANK_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?((?: [A-Z_]+\d+)*)\] ")
MARKER_FIELDS = re.compile(r"profile (\S+) spec (\S+) digest (\S+)(?: pid (\d+))?(?: start (\d+))?:")


def rank_of(line: str) -> str:
    """The rank a scheduler line names ("TP3", "PP1 TP3"), or "" for a line without a TP/PP tag."""
    m = RANK_PREFIX.match(line)
    if not m:
        return ""
    tags = dict(re.findall(r"([A-Z_]+?)(\d+)", m.group(1)))
    return " ".join(f"{t}{tags[t]}" for t in ("PP", "TP") if t in tags)


def _clip(line: str) -> str:
    return line.strip()[:300]


# ----- reading the log into per-start records ----------------------------------------------------------


class Scanner:
    """Turns whole log lines into per-start records: {"start", "profile", "spec", "digest", "pid",
    "marker", "seen": {needle: {"line", "ranks"}}, "cause": {"line", "source", "exception"} | None}."""

    def __init__(self, on_start=None, on_change=None):
        self.record: dict | None = None
        self.on_start = on_start or (lambda rec: None)
        self.on_change = on_change or (lambda rec: None)
        self._exc_budget = 0  # lines left to find the exception line of the pending cause

    def feed(self, text: str) -> None:
        """`text` holds whole lines only."""
        from launcher.runtime.server_exec import START_MARKER

        hits: set[int] = set()
        for key in (START_MARKER, *KEYS):
            at = text.find(key)
            while at >= 0:
                hits.add(text.rfind("\n", 0, at) + 1)
                end = text.find("\n", at)
                at = -1 if end < 0 else text.find(key, end)
        pos = 0
        if self._exc_budget:
            pos = self._find_exception(text, 0, len(text))
        changed = False
        for start in sorted(hits):
            if start < pos:
                continue
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            line = text[start:end]
            pos = end + 1
            if START_MARKER in line:
                if changed:
                    self.on_change(self.record)
                changed = False
                self._begin(line[line.find(START_MARKER):])
                continue
            if self.record is None:
                continue
            changed |= self._match(line)
            if self._exc_budget:  # the traceback's lines up to the next log record (hits among them are skipped)
                pos = self._find_exception(text, pos, len(text))
                changed = True
        if changed:
            self.on_change(self.record)

    def _begin(self, marker: str) -> None:
        m = MARKER_FIELDS.search(marker)
        profile, spec, digest, pid, start = m.groups() if m else (None, None, None, None, None)
        self.record = {"start": f"{start}-{pid}" if start and pid else None, "profile": profile, "spec": spec,
                       "digest": digest, "pid": int(pid) if pid else None, "marker": _clip(marker),
                       "seen": {}, "cause": None}
        self._exc_budget = 0
        self.on_start(self.record)

    def _match(self, line: str) -> bool:
        changed = False
        rank = rank_of(line)
        for needle in NEEDLES:
            if needle not in line:
                continue
            seen = self.record["seen"].setdefault(needle, {"line": _clip(line), "ranks": []})
            if rank not in seen["ranks"]:
                seen["ranks"] = sorted([*seen["ranks"], rank], key=_rank_order)
                changed = True
            for cause, source in CAUSES:
                if cause == needle and _cause_rank(self.record.get("cause")) > CAUSES.index((cause, source)):
                    self.record["cause"] = {"line": _clip(line), "source": source, "exception": None}
                    self._exc_budget = EXCEPTION_WINDOW
                    changed = True
        return changed

    def _find_exception(self, text: str, pos: int, stop: int) -> int:
        """Look for the pending cause's exception line (the traceback's last unindented line) in
        text[pos:stop]; the position it read up to."""
        while pos < stop and self._exc_budget:
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end]
            if RANK_PREFIX.match(line) or line.startswith("server_exec: "):
                self._exc_budget = 0  # the next log record: the traceback ended
                break
            pos = end + 1
            self._exc_budget -= 1
            if (line and not line[0].isspace() and not line.startswith(("Traceback (most recent call last)",
                                                                       "During handling", "The above exception"))):
                self.record["cause"]["exception"] = _clip(line)
        return pos


def _cause_rank(cause: dict | None) -> int:
    if cause is None:
        return len(CAUSES)
    return next((i for i, (_, src) in enumerate(CAUSES) if src == cause["source"]), len(CAUSES))


def _rank_order(rank: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", rank))


def scan(text: str) -> list[dict]:
    """Every start record in a log text (for tests and one-off reads)."""
    out: list[dict] = []
    s = Scanner(on_start=out.append)
    s.feed(text if text.endswith("\n") else text + "\n")
    return out


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
        from launcher.runtime.server_exec import START_MARKER

        marker = START_MARKER.encode()
        files = self._files()
        for i, path in enumerate(files):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            at = data.rfind(marker)
            if at < 0:
                continue
            at = data.rfind(b"\n", 0, at) + 1
            for j in range(i, 0, -1):  # this backup from the start line on, then the newer ones
                try:
                    chunk = data[at:] if j == i else files[j].read_bytes()
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
            with open(self.log, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(budget)
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
                with open(path, "rb") as fh:
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
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and isinstance(record.get("seen"), dict):
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
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError):
                continue
        return None

    def cause_since(self, starts_before: int) -> str | None:
        """Why the newest server started after `starts_before` start lines died, from its log."""
        with self.lock:
            if self.starts <= starts_before or not self.records:
                return None
            return cause_text(self.records[-1])


def cause_text(record: dict | None) -> str | None:
    """The log's word on why the start in `record` died: the cause line and the exception it raised."""
    cause = (record or {}).get("cause")
    if not cause:
        return None
    exc = f" -> {cause['exception']}" if cause.get("exception") else ""
    return f"{cause['line']}{exc} ({cause['source']})"


# ----- verdicts ------------------------------------------------------------------------------------------


def flag_map(flags: list[str]) -> dict[str, object]:
    """`--name value` / bare `--name` pairs of a plan's flags."""
    out: dict[str, object] = {}
    i = 0
    while i < len(flags):
        tok = flags[i]
        if tok.startswith("--"):
            if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
                out[tok[2:]] = flags[i + 1]
                i += 2
                continue
            out[tok[2:]] = True
        i += 1
    return out


def _int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except ValueError:
        return default


def expected_ranks(flags: dict[str, object]) -> list[str]:
    tp, pp = _int(flags.get("tp-size", 1), 1), _int(flags.get("pp-size", 1), 1)
    if tp <= 1:
        return [f"PP{p}" for p in range(pp)] if pp > 1 else [""]
    return [f"PP{p} TP{t}" if pp > 1 else f"TP{t}" for p in range(pp) for t in range(tp)]


def _graphs_on(flags: dict[str, object]) -> bool:
    cfg = flags.get("cuda-graph-config")
    try:
        decode = json.loads(cfg).get("decode", {}).get("backend") if isinstance(cfg, str) else None
    except (ValueError, AttributeError):
        decode = None
    return not (flags.get("disable-cuda-graph") is True or flags.get("disable-decode-cuda-graph") is True
                or flags.get("cuda-graph-backend-decode") == "disabled" or decode == "disabled")


def _ranks_text(ranks: list[str]) -> str:
    return ", ".join(r or "(no rank tag)" for r in ranks)


class _Start:
    """One start's record read against the plan: which lines every rank logged."""

    def __init__(self, record: dict | None, ranks: list[str]):
        self.record = record
        self.ranks = ranks
        self.seen = (record or {}).get("seen", {})

    def on_all(self, needle: str) -> tuple[str | None, list[str] | None]:
        """(first line, missing ranks) for a needle; (None, None) when no rank logged it."""
        hit = self.seen.get(needle)
        if not hit:
            return None, None
        got = set(hit["ranks"])
        if self.ranks != [""] and got == {""}:
            return hit["line"], None  # lines without rank tags: cannot be counted
        return hit["line"], [r for r in self.ranks if r not in got]

    def first(self, needles) -> tuple[str, str] | None:
        for needle, source in needles:
            hit = self.seen.get(needle)
            if hit:
                return hit["line"], source
        return None


def _backend_raw(det: Detector, start: _Start) -> dict:
    """One expected backend from its own lines: up on every rank, on some, given up, or silent."""
    out = {"name": det.name, "expected": True, "active": None, "verdict": "unknown", "evidence": det.unknown_reason}
    if det.line is None:
        return out
    line, missing = start.on_all(det.line)
    gave_up = start.first(det.fallbacks)
    if line and missing == []:
        caveat = next((start.seen[c]["line"] for c in det.caveats if c in start.seen), None)
        evidence = f"{line} [on every rank: {_ranks_text(start.ranks)}]"
        out.update(active=True, verdict="active", evidence=f"{evidence}; but also: {caveat}" if caveat else evidence)
    elif line and missing is None:
        out.update(evidence=f"{line} [the line carries no rank tag ([time TPn] ...), so the ranks that logged it "
                            f"cannot be counted against {len(start.ranks)}]")
    elif line:
        logged = [r for r in start.ranks if r not in missing]
        why = f"; {gave_up[0]} ({gave_up[1]})" if gave_up else ""
        out.update(active=False, verdict="failed", missing_ranks=missing,
                   evidence=f"up on some ranks only ({_ranks_text(logged)}), not on {_ranks_text(missing)}: "
                            f"those ranks run other collectives{why}; {line}")
    elif gave_up:
        out.update(active=False, verdict="fell_back", evidence=f"{gave_up[0]} ({gave_up[1]})")
    elif start.record is None:
        out.update(active=False, verdict="inactive",
                   evidence="the running server's start is not in the server log or in the state dir's start records")
    else:
        out.update(active=False, verdict="inactive",
                   evidence=f"no '{det.line}' in the server log since it started ({det.source})")
    return out


def _ca_state(flags, start: _Start, facts, facts_note: str) -> tuple[bool | None, str]:
    """Whether SGLang's custom all-reduce takes decode reductions: (True/False/None, why)."""
    tp = _int(flags.get("tp-size", 1), 1)
    if flags.get("disable-custom-all-reduce") is True:
        return False, f"--disable-custom-all-reduce ({PS_SRC}:502, sglang/srt/distributed/bootstrap.py:252)"
    off = start.first(CA_OFF)
    if off:
        return False, f"SGLang turned it off: {off[0]} ({off[1]})"
    if tp not in (2, 4, 6, 8):
        return False, f"world size {tp} is not one of 2/4/6/8 (custom_all_reduce.py:41)"
    if facts is None:
        return None, (f"at TP {tp} it is on unless " + ("P2P fails" if tp == 2 else "the GPUs are PCIe-only or lack P2P")
                      + f" ({CA_SRC}:492-510), and no SGLang line says it was turned off; {facts_note}")
    p2p = facts.p2p_ok
    if tp > 2 and facts.is_pcie:
        return False, f"host facts: {facts.interconnect}, and SGLang turns it off above 2 PCIe-only GPUs ({CA_SRC}:492-498)"
    if facts.is_pcie is None and tp > 2:
        return None, f"the host facts do not name the interconnect; at TP {tp} it is on only with full NVLink ({CA_SRC}:492)"
    if p2p is False:
        return False, f"host facts: P2P not OK, and SGLang turns it off without P2P ({CA_SRC}:501-510)"
    if p2p is None:
        return None, f"the host facts do not say whether P2P works; it is on at TP {tp} only with P2P ({CA_SRC}:501-510)"
    link = "2 GPUs (any interconnect)" if tp == 2 else "full NVLink"
    return True, (f"on: not disabled, TP {tp} with {link} and P2P (host facts); it accepts every reduction up to "
                  f"8 MiB (custom_all_reduce.py:260-275), ahead of PCIe-IPC ({PS_SRC}:959-975)")


def assess(plan, record: dict | None, facts=None, facts_note: str = "no host facts (KIT_HOST_FACTS is not set)"
           ) -> tuple[list[dict], dict]:
    """(one status per expected backend, which backend carries the decode all-reduce) for `plan`'s start."""
    flags = flag_map(plan.flags)
    env = plan.env
    ranks = expected_ranks(flags)
    start = _Start(record, ranks)
    raw = {name: _backend_raw(DETECTORS[name], start) for name in KNOWN}
    tp = _int(flags.get("tp-size", 1), 1)

    # SGLang's order per call; each stage: (backend, True/False/None, why)
    stages: list[tuple[str, bool | None, str]] = []
    fusion_on = "flashinfer-allreduce-fusion-backend" in flags and "enforce-disable-flashinfer-allreduce-fusion" not in flags
    fusion = raw["fusion"]
    if fusion["active"]:
        stages.append(("fusion", True, f"the FlashInfer fusion workspace is up and takes plain all-reduces first "
                                       f"({PS_SRC}:765, bootstrap.py:257-262): {fusion['evidence']}"))
    elif fusion_on and fusion["active"] is None:
        stages.append(("fusion", None, fusion["evidence"]))
    else:
        stages.append(("fusion", False, "fusion off" if not fusion_on else fusion["evidence"]))
    ms = raw["mscclpp"]
    if flags.get("enable-mscclpp") is True:
        if ms["active"] and not _graphs_on(flags):
            stages.append(("mscclpp", False, "MSCCL++ is up but runs only inside CUDA-graph capture, and decode "
                                             f"graphs are off ({MSCCLPP_SRC}:1266)"))
        else:
            stages.append(("mscclpp", ms["active"], ms["evidence"]))
    ca_on, ca_why = _ca_state(flags, start, facts, facts_note)
    stages.append(("ca", ca_on, ca_why))
    ipc = raw["pcie-ipc"]
    if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).lower() in ("1", "true", "yes", "on"):
        stages.append(("pcie-ipc", ipc["active"], ipc["evidence"]))

    statuses = []
    for name in plan.expects:
        st = dict(raw[name])
        ahead = []
        for backend, on, why in stages:
            if backend == name:
                break
            ahead.append((backend, on, why))
        if st["active"] is True:
            winner = next(((b, why) for b, on, why in ahead if on is True), None)
            unsure = next(((b, why) for b, on, why in ahead if on is None), None)
            if winner:
                st.update(active=False, verdict="superseded",
                          evidence=f"{st['evidence']}; but {winner[0]} comes first in SGLang's order and carries the "
                                   f"reductions: {winner[1]}")
            elif unsure:
                st.update(active=None, verdict="unknown",
                          evidence=f"{st['evidence']}; but whether {unsure[0]} comes first cannot be known: {unsure[1]}")
        statuses.append(st)

    split = next((raw[b] for b, _, _ in stages if b in raw and raw[b]["verdict"] == "failed"), None)
    if tp <= 1:
        decode = {"backend": "none", "why": "TP 1: no tensor-parallel all-reduce"}
    elif split is not None:
        decode = {"backend": None, "why": f"the ranks disagree: {split['name']} is {split['evidence']}"}
    else:
        decode = {"backend": "nccl", "why": "nothing ahead of NCCL is on"}
        for backend, on, why in stages:
            if on is True:
                decode = {"backend": backend, "why": why}
                break
            if on is None:
                decode = {"backend": None, "why": f"unknown: {backend} may be on: {why}"}
                break
        if decode["backend"] == "nccl":
            off = [f"{b}: {why}" for b, on, why in stages if on is False and b != "fusion"]
            if off:
                decode["why"] = "nothing ahead of NCCL is on (" + "; ".join(off) + ")"
    return statuses, decode


def load_facts() -> tuple[object | None, str]:
    """The host facts the control API was given (KIT_HOST_FACTS), and a note when there are none."""
    from launcher.runtime.admission import host_facts

    try:
        facts = host_facts()
    except Exception as exc:  # a bad file: the verdicts stay unknown where they need it
        return None, f"KIT_HOST_FACTS cannot be read ({exc})"
    return facts, "" if facts is not None else "no host facts (KIT_HOST_FACTS is not set)"


def inactive(statuses: list[dict]) -> list[dict]:
    """The expected backends shown not to be running (unknown ones are not counted)."""
    return [s for s in statuses if s["expected"] and s["active"] is False]


def summary(statuses: list[dict]) -> str:
    """One line naming each inactive backend and why, for a switch's error and the bench."""
    return "; ".join(f"{s['name']}: {s['evidence']}" for s in inactive(statuses))
