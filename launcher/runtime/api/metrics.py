"""The control API's own /metrics (Prometheus text format): the numbers /status shows, read from the
same place at scrape time.

One source: `Lifecycle` keeps the state, the restart counts, the health reading, the backend verdicts
and the switch counts (records/switch_counts.py: counted from history.jsonl, kept in switch-counts.json,
never going down); /status and `KitCollector` both read them, so the two can never disagree.

What a scrape may show is bounded: names that follow the profile-name pattern, 16-hex digests, fixed
vocabularies (states, outcomes, restart reasons); anything else reads "other". Never a token, a
profile's env value, a model path or an error text. A series whose value is not known (no plan, no
health reading yet, a backend whose verdict is unknown, a history that cannot be read) is absent,
never a made-up 0; a family that fails to build is left out with its traceback in the log, so a
scrape always answers 200 with what is known.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from launcher import __version__, atomic
from launcher.profiles.policy import NAME_PATTERN
from launcher.runtime import log
from launcher.runtime.core.states import State
from launcher.runtime.records.switch_counts import OTHER, SWITCH_BUCKETS_S, SwitchCounts

if TYPE_CHECKING:
    from launcher.profiles.plan import Plan

UNKNOWN = "unknown"  # a build fact this process cannot tell
NAME_RE = re.compile(NAME_PATTERN)
DIGEST_RE = re.compile(r"[0-9a-f]{16}")  # Plan.digest(): 16 hex characters
VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}")
PATCH_SET_RE = re.compile(r"[0-9a-f]{64}")
PATCH_SET_SHOWN = 12  # hex characters of the patch set's sha256 shown in kit_build_info

# The image writes the patch set's sha256 here at build (Dockerfile; also its label
# pcie-spec-kit.patches.sha256); outside the image there is none.
IMAGE_PATCH_SET_FILE = Path("/opt/kit/patches.sha256")

RESTART_CRASH = "crash"  # the server died and supervisord restarted it (/status `restarts`)
RESTART_RETRY = "retry"  # the control API restarted it after supervisord gave up (FATAL; /status `retry.attempts`)


def bounded(value: object, pattern: re.Pattern[str]) -> str:
    """A label value: `value` when it is a string that fully matches `pattern`, else "other"."""
    return value if isinstance(value, str) and pattern.fullmatch(value) else OTHER


# ----- build facts -----------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def build_info() -> dict[str, str]:
    """Kit version, the installed SGLang's version (from its metadata: nothing is imported) and the
    image's patch set (the first PATCH_SET_SHOWN hex characters of its sha256); "unknown" where not known."""
    try:
        sglang = bounded(importlib.metadata.version("sglang"), VERSION_RE)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        sglang = UNKNOWN
    patch_set = UNKNOWN
    try:
        text = atomic.read_capped(IMAGE_PATCH_SET_FILE, 128).decode("ascii", "replace").strip()
        if PATCH_SET_RE.fullmatch(text):
            patch_set = text[:PATCH_SET_SHOWN]
    except OSError:
        pass
    return {"version": bounded(__version__, VERSION_RE), "sglang": sglang, "patch_set": patch_set}


# ----- the collector ---------------------------------------------------------------------------------
def _plan_spec_labels(plan: object) -> dict[str, str] | None:
    """steps/topk/draft_tokens of the plan's EAGLE point where Plan carries one ("none" for a plan
    without a point: off, ngram), so the label set stays the same across switches."""
    if not hasattr(plan, "spec_params"):
        return None
    params = getattr(plan, "spec_params", None)
    out = {}
    for key in ("steps", "topk", "draft_tokens"):
        value = params.get(key) if isinstance(params, dict) else getattr(params, key, None)
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6
        out[key] = str(value) if ok else "none" if value is None else OTHER
    return out


class _SwitchTimes(Protocol):
    server_changed_at: float


class LifecycleView(Protocol):
    """What the collector reads of the lifecycle (launcher/runtime/lifecycle.py `Lifecycle`), which imports
    this module for its switch counts: the collector names the reads, not the class."""

    current: Plan | None
    state: str
    backends: list[dict]
    restarts: int
    switcher: _SwitchTimes

    @property
    def retries(self) -> int: ...

    def switch_counts_now(self) -> SwitchCounts | None: ...

    def health_age_s(self) -> float | None: ...

    def history_view(self) -> tuple[list[Any], int]: ...

    def spec_adaptive(self) -> dict | None: ...


class KitCollector(Collector):
    """Reads the Lifecycle at scrape time. Every family is built on its own: one that fails is left
    out (traceback to the log), the others are still served."""

    def __init__(self, lc: LifecycleView):
        self.lc = lc

    def collect(self) -> Iterable[Metric]:
        builders: tuple[Callable[[], list[Metric]], ...] = (
            self._build, self._plan, self._state, self._switches, self._backends, self._restarts,
            self._health, self._history, self._server_changed, self._spec_adaptive,
        )
        for build in builders:
            try:
                families = build()
            except Exception:
                log.exception()
                continue
            yield from families

    def _build(self) -> list[Metric]:
        info = build_info()
        g = GaugeMetricFamily("kit_build_info", "The kit's version, the installed SGLang's and the image's patch set "
                              "(first 12 hex characters of its sha256); always 1.", labels=["version", "sglang", "patch_set"])
        g.add_metric([info["version"], info["sglang"], info["patch_set"]], 1)
        return [g]

    def _plan(self) -> list[Metric]:
        plan = self.lc.current
        if plan is None:
            return []  # no readable plan: absent
        labels = {"profile": bounded(plan.name, NAME_RE), "spec": bounded(plan.spec, NAME_RE),
                  "digest": bounded(plan.digest(), DIGEST_RE)}
        labels.update(_plan_spec_labels(plan) or {})
        g = GaugeMetricFamily("kit_plan_info", "The running plan (as /status shows it); 1.", labels=list(labels))
        g.add_metric(list(labels.values()), 1)
        return [g]

    def _state(self) -> list[Metric]:
        now = State(self.lc.state)
        g = GaugeMetricFamily("kit_server_state", "1 for the state /status shows, 0 for every other.", labels=["state"])
        for s in State:
            g.add_metric([s.value], 1 if s == now else 0)
        return [g]

    def _switches(self) -> list[Metric]:
        counts = self.lc.switch_counts_now()
        if counts is None:
            return []  # history.jsonl unreadable: the counts are unknown
        total = CounterMetricFamily("kit_switch", "Switches by outcome, from history.jsonl (at control API start) "
                                    "and every switch since.", labels=["outcome"])
        for outcome, n in counts.totals.items():
            total.add_metric([outcome], n)
        hist = HistogramMetricFamily("kit_switch_duration_seconds", "Total time of a switch, by outcome.",
                                     labels=["outcome"])
        for outcome, per_bucket in counts.buckets.items():
            cumulative, acc = [], 0
            for bound, n in zip([*SWITCH_BUCKETS_S, math.inf], per_bucket, strict=True):
                acc += n
                cumulative.append((_le(bound), acc))
            hist.add_metric([outcome], cumulative, counts.sums.get(outcome, 0.0))
        return [total, hist]

    def _backends(self) -> list[Metric]:
        g = GaugeMetricFamily("kit_backend_active", "1 when an expected backend of the running plan is proven "
                              "active, 0 when not; absent while its verdict is unknown.", labels=["backend"])
        for b in list(self.lc.backends):
            active = b.get("active") if isinstance(b, dict) else None
            if isinstance(active, bool):
                g.add_metric([bounded(b.get("name"), NAME_RE)], 1 if active else 0)
        return [g]

    def _restarts(self) -> list[Metric]:
        c = CounterMetricFamily("kit_server_restarts", "Unplanned server restarts since the control API started: "
                                "crash (supervisord restarted it), retry (restarted after supervisord gave up).",
                                labels=["reason"])
        c.add_metric([RESTART_CRASH], self.lc.restarts)
        c.add_metric([RESTART_RETRY], self.lc.retries)
        return [c]

    def _health(self) -> list[Metric]:
        age = self.lc.health_age_s()
        if age is None:
            return []
        g = GaugeMetricFamily("kit_health_age_seconds", "Seconds since the server's /health was last probed.")
        g.add_metric([], age)
        return [g]

    def _history(self) -> list[Metric]:
        _, skipped = self.lc.history_view()
        g = GaugeMetricFamily("kit_history_skipped_lines", "Broken lines in the tail of history.jsonl that "
                              "/status reads (its history_skipped).")
        g.add_metric([], skipped)
        return [g]

    def _server_changed(self) -> list[Metric]:
        g = GaugeMetricFamily("kit_server_changed_timestamp_seconds", "Unix time this control API last stopped or "
                              "started the server (a switch or a rollback); absent until it has.")
        at = self.lc.switcher.server_changed_at
        if isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at) and at > 0:
            g.add_metric([], float(at))
        return [g]

    def _spec_adaptive(self) -> list[Metric]:
        """SGLang's adaptive EAGLE (--speculative-adaptive), from its log lines; absent unless the running plan
        asks for it and SGLang logged that the controller runs."""
        state = self.lc.spec_adaptive()
        if not state or state.get("active") is not True:
            return []
        out: list[Metric] = []
        steps = state.get("steps")
        if isinstance(steps, int) and not isinstance(steps, bool):
            g = GaugeMetricFamily("kit_spec_adaptive_steps", "EAGLE draft steps SGLang's adaptive controller last "
                                  "moved to (its change line names no batch-size tier); before any change, the "
                                  "first tier's starting steps. 0: a 0-step EAGLE pass (a 1-node verify), not plain decoding.")
            g.add_metric([], steps)
            out.append(g)
        c = CounterMetricFamily("kit_spec_adaptive_step_changes", "Changes of the EAGLE draft steps SGLang's "
                                "adaptive controller logged since the server started.")
        c.add_metric([], int(state.get("changes") or 0))
        out.append(c)
        ema = (state.get("last_change") or {}).get("ema_accept_len")
        if isinstance(ema, int | float) and not isinstance(ema, bool) and math.isfinite(ema):
            e = GaugeMetricFamily("kit_spec_adaptive_ema_accept_length", "The moving average of accepted draft "
                                  "tokens per verify that SGLang's last step change was decided on.")
            e.add_metric([], float(ema))
            out.append(e)
        return out


def _le(bound: float) -> str:
    if math.isinf(bound):
        return "+Inf"
    return f"{float(bound)}"
