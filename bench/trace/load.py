"""Read a Chrome trace (.json or .json.gz) as written by torch.profiler's export_chrome_trace."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from bench import JsonObject
from launcher.errors import UserError

TraceEvent = JsonObject  # one Chrome-trace event as torch.profiler wrote it: free-form JSON, read by key


def load_events(path: str | Path) -> list[TraceEvent]:
    """The trace's events; a missing, truncated or non-JSON file is a UserError naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as exc:
        raise UserError(f"{p}: trace file not found") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{p}: is a directory; give a .json or .json.gz trace file") from exc
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (EOFError, OSError, zlib.error) as exc:
        raise UserError(f"{p}: gzip data is truncated or corrupt ({exc}); capture the trace again") from exc
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UserError(
            f"{p}: not a complete JSON trace{where} (truncated or not a torch-profiler Chrome trace)"
        ) from exc
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UserError(f"{p}: no 'traceEvents' list; expected a torch-profiler Chrome trace")
    return [e for e in events if isinstance(e, dict)]
