"""Is the backend a profile asked for really running? Read it off the server's own start-up log.

Every non-NCCL path in SGLang 0.5.23 falls back to NCCL with no more than a log warning, so a
healthy server proves nothing about which all-reduce it runs. What does: the line SGLang logs once
the backend's workspace exists. Those lines, and the warnings it logs when it gives a backend up,
are listed here once (sources in docs/evidence.md, "Activation lines"); the switch, /status,
`launcher status` and the bench all ask `check`.

`active` is True (the line is there), False (it is not, or a fallback warning is), or None
(SGLang logs nothing that could tell: DeepEP's buffer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

READ_LIMIT = 16 << 20
"""At most this much of the log is read per check: the lines come within the start-up."""


@dataclass(frozen=True)
class Detector:
    name: str
    line: str | None  # what SGLang logs when the backend is up; None: it logs nothing that tells
    source: str  # where SGLang 0.5.23 logs it (file:line in the wheel)
    fallbacks: tuple[str, ...] = ()  # what it logs when it gives the backend up
    caveats: tuple[str, ...] = ()  # what it logs when some reductions skip a backend that is up
    unknown_reason: str = ""


DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "fusion",
            "FlashInfer AllReduce Fusion enabled and workspace initialized",
            "sglang/srt/layers/flashinfer_comm_fusion.py:580",
            fallbacks=(
                "Disabling flashinfer allreduce fusion permanently",
                "FlashInfer AllReduce fusion disabled",
                "FlashInfer comm not available, skipping workspace initialization",
            ),
        ),
        Detector(
            "pcie-ipc",
            "FlashInfer PCIe-IPC workspace built",
            "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py:299",
            fallbacks=(
                "reductions stay on NCCL",
                "no pcie_ipc_comm; falling back to NCCL all-reduce",
            ),
            caveats=("serves bf16 only",),
        ),
        Detector(
            "mscclpp",
            "Created MSCCL++ communicator",
            "sglang/srt/distributed/device_communicators/pymscclpp.py:1123",
            fallbacks=(
                "PyMscclpp is unavailable",
                "PyMscclpp is disabled",
                "PyMscclpp did not produce any usable tuned configurations",
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


def check(expected: list[str], log_text: str) -> list[dict]:
    """One {"name", "expected", "active", "evidence"} per expected backend, from the server's log."""
    out = []
    for name in expected:
        det = DETECTORS[name]
        if det.line is None:
            out.append({"name": name, "expected": True, "active": None, "evidence": det.unknown_reason})
            continue
        seen = _line_with(log_text, det.line)
        if seen:
            caveat = next((s for s in (_line_with(log_text, c) for c in det.caveats) if s), None)
            evidence = f"{seen}; but also: {caveat}" if caveat else seen
            out.append({"name": name, "expected": True, "active": True, "evidence": evidence})
            continue
        gave_up = next((s for s in (_line_with(log_text, f) for f in det.fallbacks) if s), None)
        evidence = gave_up or f"no '{det.line}' in the server log since it started ({det.source})"
        out.append({"name": name, "expected": True, "active": False, "evidence": evidence})
    return out


def inactive(statuses: list[dict]) -> list[dict]:
    """The expected backends shown not to be running (unknown ones are not counted)."""
    return [s for s in statuses if s["expected"] and s["active"] is False]


def summary(statuses: list[dict]) -> str:
    """One line naming each inactive backend and why, for a switch's error and the bench."""
    return "; ".join(f"{s['name']}: {s['evidence']}" for s in inactive(statuses))


def _line_with(text: str, needle: str) -> str | None:
    at = text.find(needle)
    if at < 0:
        return None
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)].strip()[:300]


def current_run(path: Path) -> str:
    """The server log after the last start line that server_exec wrote (the server running now).

    Only the last READ_LIMIT bytes are read; if the start line is not in them (the log rotated
    since), all of them count, which can only show an older server's line as well."""
    from launcher.runtime.server_exec import START_MARKER

    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - READ_LIMIT))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    at = text.rfind(START_MARKER)
    return text[at:] if at >= 0 else text


def check_server(expected: list[str], server_log: Path) -> list[dict]:
    """`check` against the running server's part of its log."""
    return check(expected, current_run(server_log)) if expected else []
