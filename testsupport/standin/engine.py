"""The simulated engine: serves requests on the schedule in ``simulation``, keeps SGLang-like stats."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from testsupport.standin import activation, numerics, simulation, trace
from testsupport.standin.server_args import ServerArgs
from testsupport.standin.settings import StandinSettings

VERSION = "0.5.23-standin"
MAX_TRACED_PASSES = 512


@dataclass
class Chunk:
    """One streamed step of a request: its new tokens and the running totals SGLang reports."""

    index: int
    new_ids: list[int]
    output_ids: list[int]
    completion_tokens: int
    spec_verify_ct: int
    finished: bool
    positions: list[numerics.Position] = field(default_factory=list)  # every token so far, with log-probabilities
    batch: int = 1  # requests in flight when this chunk's pass ran (its new tokens were decoded at it)
    # verifies so far by their correct drafts (bin k: k accepted, the bonus token excluded), as SGLang's
    # spec_correct_drafts_histogram (simulation.count_verify)
    correct_drafts_histogram: list[int] = field(default_factory=list)
    queued_s: float = 0.0  # how long the request waited for a running slot (SGLang's meta_info queue_time)


@dataclass
class ProfileSession:
    """A /start_profile in progress: where to write, and the forward passes seen so far."""

    output_dir: Path
    profile_id: str
    prefix: str | None
    num_steps: int | None
    windows_us: list[tuple[float, float]] = field(default_factory=list)
    steps: int = 0


class ProfilingError(Exception):
    """The profile request does not fit the current state (SGLang answers these with HTTP 500)."""


@dataclass
class Stats:
    """Counters as SGLang keeps them: pass totals update per chunk, request totals on completion."""

    spec_tokens: int = 0
    spec_passes: int = 0
    running: int = 0
    running_gauge: int = 0  # what /metrics' num_running_reqs reads (settings.running_gauge_after_tokens)
    waiting: int = 0  # requests arrived but not yet running (over the running cap): /metrics' num_queue_reqs
    generation_requests: int = 0
    num_requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    spec_verify_calls_total: int = 0
    # Latency histograms as SGLang's TokenizerMetricsCollector observes them, keyed by is_streaming
    # ("true"/"false"): time to first token, per-request TPOT; inter-token latency has no such label.
    ttft_s: dict[str, list[float]] = field(default_factory=dict)
    tpot_s: dict[str, list[float]] = field(default_factory=dict)
    inter_token_s: list[float] = field(default_factory=list)
    by_stream: dict[str, dict[str, int]] = field(default_factory=dict)
    # generated positions by the requests in flight when their pass ran (the batch numerics.py decodes them at)
    positions_by_batch: dict[int, int] = field(default_factory=dict)

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.spec_tokens / self.spec_passes if self.spec_passes else None


def capture_sizes(argv: list[str]) -> list[int]:
    """The `--cuda-graph-bs-decode` sizes of an argv (the values after the flag up to the next flag), none when decode
    CUDA graphs are off (`--disable-cuda-graph`, `--disable-decode-cuda-graph`, `--cuda-graph-backend-decode
    disabled`): what SGLang 0.5.23's adaptive router pads to (eagle_worker_v2.py:1408-1414)."""
    sizes: list[int] = []
    flag = None
    for tok in argv:
        if tok.startswith("--"):
            flag, _, inline = tok.partition("=")
            if flag in ("--disable-cuda-graph", "--disable-decode-cuda-graph"):
                return []
            if flag == "--cuda-graph-backend-decode" and inline == "disabled":
                return []
            tok = inline
        if flag == "--cuda-graph-backend-decode" and tok == "disabled":
            return []
        if flag == "--cuda-graph-bs-decode":
            sizes += [int(t) for t in tok.split() if t.isascii() and t.isdigit()]
    return sorted(set(sizes))


class Engine:
    """Owns the settings, the parsed server args, the request schedule and all live state."""

    def __init__(self, settings: StandinSettings, args: ServerArgs, environ: Mapping[str, str] | None = None):
        if settings.max_running_requests is not None and args.max_running_requests is None:
            args = replace(args, max_running_requests=settings.max_running_requests)  # the plan's flag wins
        self.settings = settings
        self.args = args
        self.environ = dict(os.environ if environ is None else environ)
        self.start_time = time.time()
        self.start_monotonic = time.monotonic()
        # per start, as SGLang's /server_info: phase durations of this start, and a seed drawn unless pinned
        self.startup_time = {"scheduler_e2e": round(time.time() - psutil.Process().create_time(), 6)}
        self.args_random_seed = int.from_bytes(os.urandom(4), "big") % (2**30)
        self.stats = Stats()
        self.slots = asyncio.Semaphore(args.running_cap)  # SGLang's max_running_requests (server_args.py running_cap)
        self.profile: ProfileSession | None = None
        # adaptive EAGLE (activation.py, its adaptive section): on unless SGLang would fall back to static
        self.adaptive_reason = activation.adaptive_disabled_reason(args, settings.adaptive_disabled) if activation.adaptive_requested(args) else None
        self.adaptive_on = activation.adaptive_requested(args) and self.adaptive_reason is None
        self.adaptive_steps = activation.adaptive_starting_steps(args)[0] if self.adaptive_on else None
        self.adaptive_pending = activation.parse_steps(settings.adaptive_steps) if self.adaptive_on else []
        # each tier's steps as SGLang's slots start them (adaptive_spec_params.py:178-181): the starting steps when
        # among the tier's candidates, else its middle candidate; the speed model's steps per batch size
        self.tier_steps = ({b: (args.speculative_num_steps if args.speculative_num_steps in c else c[len(c) // 2])
                            for b, c in activation.adaptive_tiers(args).items()} if self.adaptive_on else {})

    # ----- health and schedule -------------------------------------------------------------
    def healthy(self) -> bool:
        """503 while the simulated start-up runs, forever under ``hang_at_start``."""
        if self.settings.fault == "hang_at_start":
            return False
        return time.monotonic() - self.start_monotonic >= self.settings.startup_delay_s

    @property
    def accept_length(self) -> float:
        return simulation.effective_accept_length(self.settings, self.args.speculative, self.args.eagle_point)

    @property
    def interval_ms(self) -> float:
        if not self.args.speculative:
            return self.settings.decode_ms
        return simulation.verify_interval_ms(self.settings, self.args.eagle_point)

    def steps_for_batch(self, batch: int) -> int | None:
        """Under adaptive EAGLE, the steps of the tier a batch of this size runs in, routed as SGLang 0.5.23's
        `AdaptiveSpeculativeParams._route` (adaptive_spec_params.py:342-358): padded first to the smallest
        `--cuda-graph-bs-decode` size at or above it (none above: the batch itself), then the largest tier at or
        below that, else the lowest; None otherwise. Only that explicit flag pads here, as in the wheel, which hands
        the router the raw flag (eagle_worker_v2.py:1408-1414): without it, or with decode graphs off, no padding."""
        if not self.tier_steps:
            return None
        padded = self.routed_batch(batch)
        below = [b for b in self.tier_steps if b <= padded]
        return self.tier_steps[max(below) if below else min(self.tier_steps)]

    def routed_batch(self, batch: int) -> int:
        """`_pad_to_cuda_graph_bs` (adaptive_spec_params.py:348-354) over the explicit capture list."""
        sizes = capture_sizes(self.args.ignored_args)
        return min((c for c in sizes if c >= batch), default=batch)

    def pass_figures(self, batch: int) -> tuple[bool, float, float]:
        """``(speculative, accept_length, interval_ms)`` of the next pass with ``batch`` requests running: under
        adaptive EAGLE at the tier's steps (0: a verify pass of 1 token, ``simulation.zero_step_interval_ms``), slowed
        by the batching model (``batch_cost``)."""
        speculative, point = self.args.speculative, self.args.eagle_point
        steps = self.steps_for_batch(batch)
        if steps == 0:
            return True, 1.0, simulation.zero_step_interval_ms(self.settings) * simulation.batch_factor(
                self.settings.batch_cost, batch, 1)
        if steps is not None:
            point = (steps, 1, steps + 1)
        accept = simulation.effective_accept_length(self.settings, speculative, point)
        interval = simulation.verify_interval_ms(self.settings, point) if speculative else self.settings.decode_ms
        tokens = (point[2] if point else self.args.speculative_num_draft_tokens or 1) if speculative else 1
        return speculative, accept, interval * simulation.batch_factor(self.settings.batch_cost, batch, tokens)

    def schedule(self, max_new_tokens: int):
        """``(tokens, offset_s, speculative)`` per chunk: the fixed schedule, or, with a batching model or adaptive
        tiers, one whose passes follow the requests running as each chunk is sent (simulation.dynamic_chunks)."""
        if self.settings.batch_cost > 0 or self.tier_steps:
            return simulation.dynamic_chunks(max_new_tokens, self.settings.ttft_ms,
                                             lambda: self.pass_figures(max(1, self.stats.running)))
        counts = simulation.chunk_token_counts(max_new_tokens, self.accept_length, self.args.speculative)
        if not counts:
            counts = [0]  # max_new_tokens == 0: one final event after prefill, no tokens
        offsets = simulation.chunk_offsets_s(len(counts), self.settings.ttft_ms, self.interval_ms)
        return zip(counts, offsets, [self.args.speculative] * len(counts), strict=True)

    def max_tokens(self, requested: int | None) -> int:
        return self.settings.default_max_tokens if requested is None else requested

    # ----- generation ------------------------------------------------------------------------
    async def generate(self, prompt: str, max_new_tokens: int, stream: bool = True) -> AsyncIterator[Chunk]:
        """Yield the chunks of one request at their due times (sleeping against a fixed schedule)."""
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        self.stats.generation_requests += 1
        request_number = self.stats.generation_requests
        total = max(0, max_new_tokens)
        s = self.settings
        # decoded pass by pass: under the MoE numerics model (and corrupt_min_batch) a position depends on the batch
        decoder = numerics.Decoder(prompt, s.numerics, simulation.token_ids(prompt, total, s.corrupt_output),
                                   len(simulation.VOCAB), s.numerics_model, s.corrupt_min_batch)
        decoded: list[numerics.Position] = []
        output_ids: list[int] = []
        verify_ct = 0
        histogram = [0] * max(1, self.args.speculative_num_draft_tokens or 1)  # bins 0 .. draft tokens - 1
        streaming = "true" if stream else "false"
        first_at: float | None = None
        self.stats.waiting += 1
        try:
            await self.slots.acquire()  # at most args.running_cap run at once; the rest wait here, as in SGLang's queue
        finally:
            self.stats.waiting -= 1
        t0 = last_at = loop.time()  # nothing from here to `try` can raise: the slot is released in its `finally`
        self.stats.running += 1
        gauged = self.settings.running_gauge_after_tokens == 0
        self.stats.running_gauge += gauged
        try:
            for k, (count, offset, speculative) in enumerate(self.schedule(max_new_tokens)):
                await self._maybe_die(request_number, k)
                await asyncio.sleep(max(0.0, t0 + offset - loop.time()))
                batch = self.decode_pass(decoder, decoded, min(total, len(output_ids) + count))
                new_ids = [p.token_id for p in decoded[len(output_ids):len(output_ids) + count]]
                now = loop.time()
                if count and first_at is None:
                    first_at = now
                    self.stats.ttft_s.setdefault(streaming, []).append(now - arrived)  # the queue wait included
                elif count:
                    self.stats.inter_token_s.extend([(now - last_at) / count] * count)
                last_at = now
                output_ids.extend(new_ids)
                if not gauged and len(output_ids) >= self.settings.running_gauge_after_tokens:
                    gauged = True
                    self.stats.running_gauge += 1
                if count and (speculative or self.adaptive_on):  # a 0-step adaptive pass is a verify of 1 token
                    verify_ct += 1
                    simulation.count_verify(histogram, count)
                    self.stats.spec_tokens += count
                    self.stats.spec_passes += 1
                await self._record_step()
                yield Chunk(k, new_ids, output_ids, len(output_ids), verify_ct, len(output_ids) >= total,
                            decoded[:len(output_ids)], batch, list(histogram), t0 - arrived)
            self.stats.num_requests_total += 1
            self.stats.prompt_tokens_total += simulation.prompt_token_count(prompt)
            self.stats.generation_tokens_total += len(output_ids)
            self.stats.spec_verify_calls_total += verify_ct
            counts_ = self.stats.by_stream.setdefault(streaming, {"requests": 0, "prompt": 0, "generation": 0})
            counts_["requests"] += 1
            counts_["prompt"] += simulation.prompt_token_count(prompt)
            counts_["generation"] += len(output_ids)
            if first_at is not None and len(output_ids) > 1:
                self.stats.tpot_s.setdefault(streaming, []).append((last_at - first_at) / (len(output_ids) - 1))
            self._adaptive_change()
        finally:
            self.stats.running -= 1
            self.stats.running_gauge -= gauged
            self.slots.release()

    def decode_pass(self, decoder: numerics.Decoder, decoded: list[numerics.Position], upto: int) -> int:
        """Decode a request's positions up to `upto` in the pass running now, and return its batch: the
        generation requests in flight now, this one included (SGLang's running batch; numerics.py pads it as a
        CUDA graph would). Requests that overlap share every pass, so N requests in flight together are decoded
        at batch N, whatever the timing model."""
        batch = max(1, self.stats.running)
        while len(decoded) < upto:
            decoded.append(decoder.next(batch))
            self.stats.positions_by_batch[batch] = self.stats.positions_by_batch.get(batch, 0) + 1
        return batch

    def _adaptive_change(self) -> None:
        """A finished request moves adaptive EAGLE to the next of STANDIN_ADAPTIVE_STEPS, logged as SGLang does."""
        if not self.adaptive_pending or self.adaptive_steps is None:
            return
        new = self.adaptive_pending.pop(0)
        if new != self.adaptive_steps:
            print(activation.adaptive_update_line(self.args, self.adaptive_steps, new, max(0.0, self.accept_length - 1)),
                  file=sys.stderr, flush=True)
            self.adaptive_steps = new

    async def _maybe_die(self, request_number: int, chunks_sent: int) -> None:
        s = self.settings
        if (
            s.fault != "die_mid_stream"
            or request_number != s.die_on_request
            or chunks_sent != s.die_after_chunks
        ):
            return
        await asyncio.sleep(0.05)  # let the chunks already written leave the socket
        print(
            f"SIMULATED fault die_mid_stream: exiting abruptly after {chunks_sent} chunk(s) "
            f"of generation request {request_number}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    def meta_info(
        self, rid: str, prompt: str, chunk: Chunk, max_new_tokens: int, t0: float
    ) -> dict[str, object]:
        """SGLang's ``meta_info`` for one chunk. As 0.5.23 sends it (managers/tokenizer_manager.py, around 2755 and
        3150-3172): the ``spec_*`` keys, ``spec_verify_ct`` included, only in the finished chunk and only under
        speculation with drafts proposed; never in the chunks before it, never without speculation. The correct
        drafts are the histogram's weighted sum: each chunk is one verify with its tokens less one correct."""
        meta: dict[str, object] = {
            "id": rid,
            "finish_reason": {"type": "length", "length": max_new_tokens} if chunk.finished else None,
            "prompt_tokens": simulation.prompt_token_count(prompt),
            "completion_tokens": chunk.completion_tokens,
            "cached_tokens": 0,
            "reasoning_tokens": 0,
            "weight_version": "default",
        }
        drafts = self.args.speculative_num_draft_tokens
        if chunk.finished and chunk.spec_verify_ct > 0 and drafts and drafts > 1:
            proposed = chunk.spec_verify_ct * (drafts - 1)
            histogram = chunk.correct_drafts_histogram
            correct = sum(k * n for k, n in enumerate(histogram))  # = completion_tokens - spec_verify_ct
            meta["spec_accept_rate"] = correct / proposed
            meta["spec_accept_length"] = chunk.completion_tokens / chunk.spec_verify_ct
            meta["spec_num_correct_drafts"] = correct
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = chunk.spec_verify_ct
            meta["spec_correct_drafts_histogram"] = list(histogram)
        if self.args.enable_metrics:  # with --enable-metrics SGLang adds the scheduler's queue time to every chunk
            meta["queue_time"] = chunk.queued_s  # (tokenizer_manager.py:2515-2518, req_time_stats.py:1233)
        if chunk.finished:
            meta["e2e_latency"] = time.monotonic() - t0
        return meta

    @staticmethod
    def new_request_id() -> str:
        return uuid.uuid4().hex

    # ----- profiling -------------------------------------------------------------------------
    def start_profile(self, body: Mapping[str, object]) -> None:
        """Begin recording forward passes, as SGLang's /start_profile does."""
        if self.profile is not None:
            raise ProfilingError("Profiling is already in progress. Call /stop_profile first.")
        output_dir = body.get("output_dir") or self.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp"
        num_steps = body.get("num_steps")
        if num_steps is not None and (not isinstance(num_steps, int) or num_steps < 1):
            raise ValueError("num_steps must be a positive integer")
        self.profile = ProfileSession(
            output_dir=Path(str(output_dir)).expanduser(),
            profile_id=str(body.get("profile_id") or time.time()),
            prefix=str(body["profile_prefix"]) if body.get("profile_prefix") else None,
            num_steps=num_steps,
        )

    async def stop_profile(self) -> list[Path]:
        """Write the traces of the running profile (synthetic passes if none were seen)."""
        if self.profile is None:
            raise ProfilingError("Profiling is not in progress. Call /start_profile first.")
        return await self._finish_profile()

    async def _record_step(self) -> None:
        session = self.profile
        if session is None:
            return
        duration = self.interval_ms * 1000.0
        if len(session.windows_us) < MAX_TRACED_PASSES:
            session.windows_us.append((time.time() * 1e6 - duration, duration))
        session.steps += 1
        if session.num_steps is not None and session.steps >= session.num_steps:
            await self._finish_profile()

    async def _finish_profile(self) -> list[Path]:
        session = self.profile
        assert session is not None
        self.profile = None
        windows = session.windows_us
        if not windows:
            duration = self.interval_ms * 1000.0
            end = time.time() * 1e6
            n = self.settings.trace_min_passes
            windows = [(end - (n - i) * duration, duration) for i in range(n)]
        return await asyncio.to_thread(
            trace.write_traces,
            session.output_dir,
            session.profile_id,
            session.prefix,
            self.args.tp_size,
            windows,
            self.settings.trace_comm_fraction,
            self.settings.trace_allreduces_per_pass,
            self.environ,
        )

    # ----- reports ---------------------------------------------------------------------------
    def internal_state(self) -> dict[str, object]:
        """One DP rank's internal state; ``avg_spec_accept_length`` only with speculation, as SGLang."""
        state: dict[str, object] = {"simulated": True,
                                    # scheduler_components/internal_state.py:73 (one DP rank: all of it)
                                    "effective_max_running_requests_per_dp": self.args.running_cap}
        avg = self.stats.avg_spec_accept_length
        if self.args.speculative and avg is not None:
            state["avg_spec_accept_length"] = avg
        return state
