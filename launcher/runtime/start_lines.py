"""SGLang's start-up lines, read per rank from the server log into one record per server start.

Which lines tell that a backend came up, gave up, or why the server died (`DETECTORS`, `CA_OFF`,
`CAUSES`; sources in docs/evidence.md, "Activation lines"), and the `Scanner` that reads whole log
lines into per-start records: for each matched line, the ranks (`[time DPn PPn TPn EPn]` prefix) that
logged it. The verdicts on those records are activation.py's; keeping them as the log rotates is
start_records.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UPSTREAM = "https://github.com/sgl-project/sglang/blob/v0.5.23/python/"
START_MARKER = "server_exec: profile "
"""Starts the line server_exec writes before each server start (`... digest D pid P start MS: argv`): the
control API's log follower (start_records.Follower) keeps what each start logged under its pid and start time."""
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
CAR_SRC = "sglang/srt/distributed/device_communicators/custom_all_reduce.py"

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
# SGLang's custom all-reduce is on: after each CUDA-graph capture its `capture()` context registers the
# captured buffers, and only while it is not disabled (custom_all_reduce.py:181-194); the line comes from
# TP rank 0 alone (`log_info_on_rank0`, custom_all_reduce.py:238/242, utils/common.py:3982-3986), so it
# cannot be counted per rank. The v2 class (full NVLink) logs "Registered N cuda graph addresses via ..."
# on its VMM path (utils/cuda_vmm_utils.py:1272-1277) and nothing on its IPC path: absence proves nothing.
CA_ON: tuple[tuple[str, str], ...] = (
    ("cuda graph addresses", f"{CAR_SRC}:181-194, 234-242"),
)
# What PCIe-IPC's prepare() logs after its workspace is built, all in `_tune` (pcie_ipc_ar.py:322-385), on
# every rank (logger, not rank 0 only): measured tactics in place (read from $FLASHINFER_AUTOTUNE_DIR or
# measured at this start), or FlashInfer's seed policy, nothing measured on this host.
IPC_TUNED: tuple[str, str] = ("PCIe-IPC all-reduce autotuned", f"{IPC_SRC}:380-385")
IPC_SEED: tuple[tuple[str, str], ...] = (
    ("keeping FlashInfer's seed policy", f"{IPC_SRC}:329-333"),  # --disable-flashinfer-autotune
    ("keeping the seed policy", f"{IPC_SRC}:338-367"),  # inside another autotune or a capture; tune() raised
    ("running FlashInfer's seed policy", f"{IPC_SRC}:347-351"),  # no host (CPU) group
    ("the kernels keep the seed policy", f"{IPC_SRC}:371-377"),  # tune() covered no shapes
)
# EAGLE's run-time adaptation (--speculative-adaptive; docs/evidence.md, "Adaptive speculation"). The TP rank 0
# scheduler that hosts the draft logs "initialized" when its EAGLE worker builds the controller
# (eagle_worker_v2.py:1346-1355 -> adaptive_spec_params.py:297-303, log_info_on_rank0: utils/common.py:3982-3986),
# with the first (smallest) batch-size tier's steps and candidate steps; the launcher logs "disabled" with
# SGLang's reason while it resolves the server arguments, then the server runs static speculation
# (speculative_hook.py:1374-1389). Each change of one tier's steps logs an "updated" line, again on TP rank 0
# only, naming no tier (adaptive_spec_params.py:263-272).
ADAPTIVE_SRC = "sglang/srt/speculative/adaptive_spec_params.py"
ADAPTIVE_ON: tuple[str, str] = ("AdaptiveSpeculativeParams initialized", f"{ADAPTIVE_SRC}:297-303")
ADAPTIVE_OFF: tuple[str, str] = ("speculative_adaptive disabled", "sglang/srt/arg_groups/speculative_hook.py:1379-1384")
ADAPTIVE_UPDATE: tuple[str, str] = ("Adaptive spec params updated", f"{ADAPTIVE_SRC}:263-270")
ADAPTIVE_ON_RE = re.compile(r"AdaptiveSpeculativeParams initialized: steps=(\d+), candidate_steps=\[([\d, ]*)\]")
ADAPTIVE_OFF_RE = re.compile(r"speculative_adaptive disabled: (.*?)\. Falling back to static speculative params\.")
ADAPTIVE_UPDATE_RE = re.compile(r"Adaptive spec params updated: steps (\d+) -> (\d+) \(ema_accept_len=([^)\s]*)\)")
CAUSES: tuple[tuple[str, str], ...] = (  # why a server died at start-up, most specific first
    ("Failed to initialize MSCCL++ collectives", f"{MSCCLPP_SRC}:1114"),
    ("Scheduler hit an exception", "sglang/srt/managers/scheduler.py:6372"),
)
NEEDLES: tuple[str, ...] = tuple(
    [d.line for d in DETECTORS.values() if d.line]
    + [f for d in DETECTORS.values() for f, _ in d.fallbacks]
    + [c for d in DETECTORS.values() for c in d.caveats]
    + [n for n, _ in CA_OFF]
    + [n for n, _ in CA_ON]
    + [IPC_TUNED[0]]
    + [n for n, _ in IPC_SEED]
    + [n for n, _ in CAUSES]
    + [ADAPTIVE_ON[0], ADAPTIVE_OFF[0]]
)
# Cheap substrings that every needle line contains: the log is searched for these, the hits' lines
# for the needles (a chatty server writes tens of MB; one search per key keeps that well under a second).
# Every line SGLang logs with a needle in it holds one of these (tests/launcher/runtime/test_activation.py checks).
KEYS: tuple[str, ...] = ("FlashInfer", "flashinfer", "PCIe-IPC", "pcie_ipc_comm", "MSCCL++", "PyMscclpp",
                         "CustomAllreduce", "Custom allreduce", "Scheduler hit an exception",
                         "cuda graph addresses", "AdaptiveSpeculativeParams", "speculative_adaptive disabled",
                         "Adaptive spec params updated")

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
        if ADAPTIVE_UPDATE[0] in line:
            changed |= self._adaptive_update(line, rank)
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

    def _adaptive_update(self, line: str, rank: str) -> bool:
        """One "Adaptive spec params updated" line: count it and keep the last (record["adaptive"])."""
        m = ADAPTIVE_UPDATE_RE.search(line)
        if not m:
            return False
        ad = self.record.setdefault("adaptive", {"changes": 0, "ranks": []})
        ad["changes"] = int(ad.get("changes") or 0) + 1
        ad["last"] = {"from": int(m.group(1)), "to": int(m.group(2)), "ema_accept_len": _float(m.group(3)),
                      "line": _clip(line)}
        if rank not in ad.setdefault("ranks", []):
            ad["ranks"] = sorted([*ad["ranks"], rank], key=_rank_order)
        return True

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


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def adaptive_init(line: str) -> tuple[int, list[int]] | None:
    """(steps, candidate steps) of SGLang's "AdaptiveSpeculativeParams initialized" line, or None."""
    m = ADAPTIVE_ON_RE.search(line)
    if not m:
        return None
    return int(m.group(1)), [int(x) for x in m.group(2).replace(" ", "").split(",") if x]


def adaptive_reason(line: str) -> str | None:
    """SGLang's reason in its "speculative_adaptive disabled: <reason>. Falling back ..." line, or None."""
    m = ADAPTIVE_OFF_RE.search(line)
    return m.group(1) if m else None


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


def cause_text(record: dict | None) -> str | None:
    """The log's word on why the start in `record` died: the cause line and the exception it raised."""
    cause = (record or {}).get("cause")
    if not cause:
        return None
    exc = f" -> {cause['exception']}" if cause.get("exception") else ""
    return f"{cause['line']}{exc} ({cause['source']})"
