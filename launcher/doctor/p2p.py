"""Parse `nvidia-smi topo -p2p r`: can each GPU read its peers' memory directly?

Statuses from the driver's legend: X (self), OK, CNS (chipset not supported), GNS (GPU not
supported), TNS (topology not supported), NS (not supported), DR (disabled by regkey), U (unknown).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.doctor.textfmt import body_rows, fields, format_error, table_lines

EXPECTED = "output of `nvidia-smi topo -p2p r` (a header row GPU0 GPU1 ..., then one row per GPU of X/OK/NS/...)"
STATUS_MEANING = {
    "X": "self",
    "OK": "ok",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}
_GPU = re.compile(r"^GPU(\d+)$")


@dataclass
class P2PMatrix:
    gpus: list[int]
    status: dict[tuple[int, int], str]  # (reader, peer) -> status, a != b

    def bad_pairs(self) -> list[tuple[int, int, str]]:
        """Unordered pairs (a < b) where either direction is not OK, with the worse-sounding status."""
        out = []
        for i, a in enumerate(self.gpus):
            for b in self.gpus[i + 1 :]:
                s1, s2 = self.status[(a, b)], self.status[(b, a)]
                if s1 != "OK" or s2 != "OK":
                    out.append((a, b, s1 if s1 != "OK" else s2))
        return out

    @property
    def ok(self) -> bool | None:
        """None for a single GPU (no peers to talk to)."""
        if len(self.gpus) < 2:
            return None
        return not self.bad_pairs()


def parse(text: str, source: str = "nvidia-smi topo -p2p r") -> P2PMatrix:
    lines, idx = table_lines(text, source, EXPECTED)
    header = fields(lines[idx])
    if not header or not all(_GPU.match(h) for h in header):
        raise format_error(source, idx + 1, lines[idx], "the header must list only GPU0 GPU1 ...", EXPECTED)
    labels = header
    rows: dict[str, list[str]] = {}
    body, end = body_rows(lines, idx + 1)
    for i, line, toks in body:
        label, entries = toks[0], toks[1:]
        if label not in labels or label in rows:
            raise format_error(source, i + 1, line, f"unexpected row label '{label}'", EXPECTED)
        if len(entries) != len(labels):
            raise format_error(source, i + 1, line, f"row has {len(entries)} entries, the header has {len(labels)} GPUs", EXPECTED)
        bad = next((e for e in entries if e not in STATUS_MEANING), None)
        if bad is not None:
            raise format_error(source, i + 1, line, f"unknown P2P status '{bad}' (known: {', '.join(STATUS_MEANING)})", EXPECTED)
        rows[label] = entries
    missing = [g for g in labels if g not in rows]
    if missing:
        at = min(end, len(lines) - 1)
        raise format_error(source, at + 1, lines[at], f"no row for {missing[0]}", EXPECTED)
    gpus = [int(_GPU.match(h).group(1)) for h in labels]  # type: ignore[union-attr]
    status = {
        (a, b): rows[f"GPU{a}"][j] for a in gpus for j, b in enumerate(gpus) if a != b
    }
    return P2PMatrix(gpus=sorted(gpus), status=status)
