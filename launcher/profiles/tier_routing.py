"""Where SGLang 0.5.23 routes a decode batch among adaptive tiers, and SGLang's own reading of an adaptive config
file: the key a tier must have to serve a measured level (`Routing`), tiers from the levels' winners
(`from_levels`), and `read_config` (the rules that check a config file and the PCIe workspace read it)."""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import UserError
from launcher.profiles import running_requests
from launcher.profiles.adaptive_tiers import AdaptiveTiers, make_tiers

CAPTURE_FLAG = "--cuda-graph-bs-decode"


@dataclass(frozen=True)
class Routing:
    """How SGLang 0.5.23 takes a decode batch to a tier (`AdaptiveSpeculativeParams._route`,
    adaptive_spec_params.py:342-358): the batch is padded to the smallest size of `capture` at or above it (none
    above: the batch itself), then served by the largest tier key at or below that.

    `capture` is `--cuda-graph-bs-decode` exactly as the plan gives it, None when unset or when decode CUDA
    graphs are off: SGLang hands the adaptive router that raw flag (eagle_worker_v2.py:1408-1414), never the
    default capture list (cuda_graph_hook.py:500-532) nor the one the graph runner clamps to the request pool
    (base_cuda_graph_runner.py:94-102). `running`: the running-request cap the server resolves (the flag, else
    48 under EAGLE), None when not known; a level above it never runs a batch wider than it."""

    capture: tuple[int, ...] | None = None
    running: int | None = None

    def batch(self, level: int) -> int:
        """The widest decode batch `level` concurrent requests make: the level, capped by the request pool."""
        return min(level, self.running) if self.running else level

    def padded(self, batch: int) -> int:
        """`_pad_to_cuda_graph_bs` (adaptive_spec_params.py:348-354)."""
        if not self.capture:
            return batch
        i = bisect.bisect_left(self.capture, batch)
        return self.capture[i] if i < len(self.capture) else batch

    def key(self, level: int) -> int:
        """The tier key that serves `level`'s batches and no other capture size: the padded size SGLang routes
        them to; where that lies above the request cap (a capture list wider than the pool), the smallest batch
        padded to it, which routes the same (every routed size is a capture size or above the last) and stays
        within the cap."""
        batch = self.batch(level)
        padded = self.padded(batch)
        if self.running is not None and padded > self.running and self.capture:
            below = [c for c in self.capture if c < padded]
            return (max(below) + 1) if below else 1
        return padded

    def steps_for(self, tiers: AdaptiveTiers, level: int) -> tuple[int, ...]:
        """The candidate steps `level` concurrent requests run under `tiers`, as SGLang routes them."""
        return tiers.steps_for(self.padded(self.batch(level)))

    def to_json(self) -> dict[str, object]:
        return {"capture": list(self.capture) if self.capture is not None else None, "running": self.running}

    @classmethod
    def from_flags(cls, flags: list[str]) -> Routing:
        """The routing of a plan's SGLang flags (`Plan.flags`): its explicit capture list, unless decode CUDA
        graphs are off (the router gets None then, eagle_worker_v2.py:1410-1412), and its request cap."""
        values: dict[str, list[str]] = {}
        key = None
        for tok in flags:
            if tok.startswith("--"):
                key, _, inline = tok.partition("=")
                values[key] = [inline] if inline else []
            elif key is not None:
                values[key].append(tok)
        off = ("--disable-cuda-graph" in values or "--disable-decode-cuda-graph" in values
               or (values.get("--cuda-graph-backend-decode") or [""])[0] == "disabled")
        sizes = [int(t) for v in values.get(CAPTURE_FLAG, []) for t in v.split() if t.isascii() and t.isdigit()]
        capture = None if off or not sizes else tuple(sorted(sizes))
        named = {k[2:]: (v[0] if v else True) for k, v in values.items()}
        return cls(capture, running_requests.resolve(named)[0])


def from_levels(steps_by_level: Mapping[int, int], routing: Routing | None = None) -> AdaptiveTiers:
    """One tier per measured concurrency level, holding the steps measured best there, keyed where SGLang
    routes that level's batches (`Routing.key`; without a routing, at the level: no capture list, no cap).
    Levels that route to one key must hold the same steps (bench/tune/adaptive.py picks them), or UserError.
    A batch runs the tier of the largest key at or below its padded size, so the batches between two levels
    run the lower level's steps; the lowest level should be 1, which every single request's batch reaches."""
    routing = routing or Routing()
    by_key: dict[int, set[int]] = {}
    for level, steps in steps_by_level.items():
        by_key.setdefault(routing.key(level), set()).add(steps)
    clash = {k: sorted(v) for k, v in by_key.items() if len(v) > 1}
    if clash:
        raise UserError(f"tiers from the levels' winners: levels routed to one tier hold different steps {clash}")
    return make_tiers([(key, sorted(steps)) for key, steps in by_key.items()], "tiers from the levels' winners")


def read_config(path: str) -> tuple[dict[int, list[int]] | None, str]:
    """SGLang's reading of an adaptive config (_load_adaptive_config, adaptive_spec_params.py:103-139):
    ({batch size: candidate steps}, "") or (None, why it fails)."""
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    except ValueError as exc:
        return None, f"is not JSON ({exc})"
    if not isinstance(cfg, dict):
        return None, "is not a JSON object of batch-size tiers"
    tiers: dict[int, list[int]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue  # SGLang skips keys that are not digits (adaptive_spec_params.py:118-119)
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)):
            return None, f"tier {key}: candidate_steps must be a non-empty list of non-negative ints, got {steps!r}"
        tiers[int(key)] = steps
    if not tiers:
        return None, f"holds no batch-size tier (an integer-string key such as \"1\"); keys: {list(cfg)[:8]}"
    return tiers, ""
