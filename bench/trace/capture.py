"""Capture a trace from a running SGLang server with /start_profile (and /stop_profile if needed).

SGLang 0.5.23 takes `ProfileReq` as the JSON body of POST /start_profile: `output_dir`, `num_steps`
(it stops and writes by itself after that many forward steps), `activities` (["CPU", "GPU"]), ...
Each TP rank then writes `[<prefix>-]<profile_id>-TP-<rank>.trace.json.gz` into `output_dir` on the
server's filesystem. Steps only happen under load, so unless told not to, this sends one greedy
/generate request while the profiler runs. If no file appears in time, it calls /stop_profile (which
writes what was recorded) and waits once more.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from launcher.errors import RuntimeFailure, UserError

TRACE_GLOBS = ("*.trace.json.gz", "*.trace.json", "*.json.gz", "*.json")
LOAD_PROMPT = "Explain, step by step, how a ring all-reduce works across eight GPUs."


def _newest_trace(directory: Path, since: float) -> Path | None:
    found = {p for g in TRACE_GLOBS for p in directory.glob(g) if p.is_file() and p.stat().st_mtime >= since}
    if not found:
        return None
    rank0 = [p for p in found if "TP-0" in p.name]
    return max(rank0 or found, key=lambda p: p.stat().st_mtime)


def _wait_for_trace(directory: Path, since: float, timeout_s: float) -> Path | None:
    """Newest trace written after `since`, once its size has stopped changing."""
    deadline = time.monotonic() + timeout_s
    last: tuple[Path, int] | None = None
    while time.monotonic() < deadline:
        path = _newest_trace(directory, since)
        if path is not None:
            size = path.stat().st_size
            if last == (path, size) and size > 0:
                return path
            last = (path, size)
        time.sleep(0.25)
    return None


def _drive_load(client: httpx.Client, url: str, max_new_tokens: int, errors: list[str]) -> None:
    body = {"text": LOAD_PROMPT, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    try:
        client.post(f"{url}/generate", json=body, timeout=120.0).raise_for_status()
    except httpx.HTTPError as exc:
        errors.append(f"load request failed: {exc}")


def capture(
    url: str,
    steps: int,
    out_dir: Path,
    server_dir: str | None = None,
    drive_load: bool = True,
    timeout_s: float = 120.0,
) -> Path:
    """Ask the server to profile `steps` forward steps; return the local path of the newest trace."""
    if steps < 1:
        raise UserError(f"--steps must be at least 1, got {steps}")
    url = url.rstrip("/")
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {
        "output_dir": server_dir or str(out_dir.resolve()),
        "num_steps": steps,
        "activities": ["CPU", "GPU"],
    }
    since = time.time() - 1.0
    errors: list[str] = []
    with httpx.Client() as client:
        try:
            resp = client.post(f"{url}/start_profile", json=body, timeout=60.0)
        except httpx.HTTPError as exc:
            raise RuntimeFailure(
                f"{url}/start_profile: cannot reach the server ({exc}); is it up? try `launcher status`"
            ) from exc
        if resp.status_code != 200:
            raise RuntimeFailure(
                f"{url}/start_profile answered {resp.status_code}: {resp.text.strip()[:300]}"
            )
        loader = None
        if drive_load:
            loader = threading.Thread(
                target=_drive_load, args=(client, url, steps * 8 + 16, errors), daemon=True
            )
            loader.start()
        path = _wait_for_trace(out_dir, since, timeout_s)
        if path is None:
            try:
                client.post(f"{url}/stop_profile", timeout=60.0)
            except httpx.HTTPError as exc:
                errors.append(f"/stop_profile failed: {exc}")
            path = _wait_for_trace(out_dir, since, min(timeout_s, 60.0))
        if loader is not None:
            loader.join(timeout=5.0)
    if path is None:
        hint = "; ".join(errors) or "the server wrote no trace"
        raise RuntimeFailure(
            f"no trace appeared in {out_dir} within {timeout_s:g} s ({hint}); if the server runs in a container, "
            f"mount that directory and pass the in-container path with --server-dir"
        )
    return path
