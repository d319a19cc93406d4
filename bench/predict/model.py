"""The cost model (all times in ms unless the name says us), on typed inputs, no command line.

verify_ms     = compute_ms + decode_ms + verify_coll_ms + overhead_ms
  decode_ms   = n_decode * allreduce_us / 1000                (the target forward's collectives, graphed)
  verify_coll_ms = n_verify * broadcast_us / 1000             (the sampling broadcasts, un-graphed)
cycle_ms      = draft_ms + verify_ms                      (one speculative step)
spec_tokps    = accept_len / cycle_ms * 1000              (accept_len: tokens emitted per step)
baseline_tokps= 1000 / decode_ms                          (one token per plain decode step)
breakeven_accept_len = baseline_tokps * cycle_ms / 1000   (accept length at which spec == baseline)
verify_budget_ms(target) = accept_len * 1000 / target - draft_ms
allreduce_us_for(target) = (verify_budget_ms(target) - compute_ms - overhead_ms - verify_coll_ms) * 1000 / n_decode
                           (n_decode + n_verify when the broadcasts cost what an all-reduce does)

The collective counts per step come from `step_collectives`, the one place that counts them (bench
predict and the tune's order, bench/tune/order.py, both call it). For SGLang 0.5.23 at TP > 1 without
DP attention, a DeepSeek-V3-class target forward (decode, or the verify of a draft tree) runs:
  - 1 all-reduce of the vocab-parallel embedding (srt/layers/vocab_parallel_embedding.py:525-533);
  - 2 all-reduces per transformer layer, attention out and MLP/MoE out: the decoder layer builds both
    with reduce_results=False (srt/models/deepseek_v2.py:2639, 2662, 2674) and the layer boundary sums
    them (srt/layers/layer_boundary/prepare.py:163-170);
  - 1 all-gather of the vocab-parallel logits (srt/layers/logits_processor.py:1024-1036, falling back to
    tensor_model_parallel_all_gather in srt/distributed/device_communicators/triton_symm_mem_ag.py:519-521).
These run inside the CUDA graph. A verify step that is not all greedy (temperature > 0) then runs 3
broadcasts from rank 0 outside the graph: predict, accept_index and num_correct_drafts
(srt/speculative/eagle_utils.py:797-805; the sparse top-k path 701-711 does the same); an all-greedy
batch takes the argmax path (eagle_utils.py:641-675), which broadcasts only on ROCm. A plain decode
step samples without a collective (srt/layers/sampler.py:348, only with SYNC_TOKEN_IDS_ACROSS_TP or a
grammar). The draft model's own collectives are part of draft_ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.predict.records import Scenario, Target

EMBEDDING_ALLREDUCES = 1  # vocab_parallel_embedding.py:525-533
ALLREDUCES_PER_LAYER = 2  # attention out + MLP/MoE out: deepseek_v2.py:2639/2662/2674, layer_boundary/prepare.py:163-170
LOGITS_ALLGATHERS = 1  # logits_processor.py:1024-1036
SAMPLING_BROADCASTS = 3  # eagle_utils.py:803-805, when the batch is not all greedy
DEFAULT_LAYERS = 61
KNOWN_LAYERS: dict[str, int] = {
    # num_hidden_layers of the model each overlay (profiles/model/<name>.toml) is for, from its config.json
    "kimi-k2": 61,  # moonshotai/Kimi-K2-Instruct config.json
    "deepseek-v3": 61,  # deepseek-ai/DeepSeek-V3 config.json
}


@dataclass(frozen=True)
class Collectives:
    """The collectives of one speculative step: the target forward's (decode) and the verify's own."""

    layers: int
    layers_source: str
    allreduces: int  # target forward: embedding + 2 per layer
    allgathers: int  # target forward: logits
    broadcasts: int  # verify sampling, temperature > 0 only
    temperature: float = 0.0

    @property
    def decode(self) -> int:
        """Collectives of the target forward, priced at the all-reduce latency."""
        return self.allreduces + self.allgathers

    @property
    def verify(self) -> int:
        """Collectives the verify adds to a forward: the un-graphed sampling broadcasts."""
        return self.broadcasts

    def describe(self) -> str:
        return (f"{self.decode} decode collectives = {self.allreduces} all-reduces ({EMBEDDING_ALLREDUCES} embedding + "
                f"{ALLREDUCES_PER_LAYER} x {self.layers} layers, {self.layers_source}) + {self.allgathers} logits "
                f"all-gather; {self.verify} verify collectives ({SAMPLING_BROADCASTS} sampling broadcasts when "
                f"temperature > 0, here {self.temperature:g})")


def step_collectives(layers: int, temperature: float = 0.0, *, layers_source: str = "given", tp: int = 8,
                     speculative: bool = True) -> Collectives:
    """The one count of a step's collectives (module docstring): decode and, for a speculative verify at
    temperature > 0, the sampling broadcasts. TP 1 runs none."""
    if tp <= 1:
        return Collectives(layers, layers_source, 0, 0, 0, temperature)
    return Collectives(
        layers, layers_source,
        allreduces=EMBEDDING_ALLREDUCES + ALLREDUCES_PER_LAYER * layers,
        allgathers=LOGITS_ALLGATHERS,
        broadcasts=SAMPLING_BROADCASTS if speculative and temperature > 0 else 0,
        temperature=temperature,
    )


def model_layers(*, overlay: str | None = None, model_path: str | None = None) -> tuple[int, str]:
    """(transformer layers of the target, where the number came from): the model directory's config.json
    (`num_hidden_layers`) when it can be read here, else the model overlay's known model, else 61."""
    if model_path:
        try:
            config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
            text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
            layers = int(text["num_hidden_layers"])
            if layers > 0:
                return layers, f"num_hidden_layers of {model_path}/config.json"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if overlay and overlay in KNOWN_LAYERS:
        return KNOWN_LAYERS[overlay], f"model overlay {overlay}"
    what = f"model overlay {overlay} not known here" if overlay else "no model named"
    return DEFAULT_LAYERS, f"default {DEFAULT_LAYERS} ({what}; Kimi-K2.x and DeepSeek-V3 have 61)"


def verify_ms(compute_ms: float, n_allreduce: int, allreduce_us: float, overhead_ms: float = 0.0, *,
              broadcasts: int = 0, broadcast_us: float | None = None) -> float:
    """Verify time: compute + the forward's collectives at `allreduce_us` + the verify's broadcasts at
    `broadcast_us` (None: at `allreduce_us`) + overhead."""
    bus = allreduce_us if broadcast_us is None else broadcast_us
    return compute_ms + n_allreduce * allreduce_us / 1000.0 + broadcasts * bus / 1000.0 + overhead_ms


def spec_tokps(accept_len: float, draft_ms: float, verify_ms_: float) -> float:
    return accept_len / (draft_ms + verify_ms_) * 1000.0


def baseline_tokps(decode_ms: float) -> float:
    return 1000.0 / decode_ms


def breakeven_accept_len(baseline_tokps_: float, draft_ms: float, verify_ms_: float) -> float:
    return baseline_tokps_ * (draft_ms + verify_ms_) / 1000.0


def verify_budget_ms(target_tokps: float, accept_len: float, draft_ms: float) -> float:
    """The longest verify pass that still reaches `target_tokps` at this accept length."""
    return accept_len * 1000.0 / target_tokps - draft_ms


def allreduce_us_within(budget_ms: float, compute_ms: float, overhead_ms: float, n_allreduce: int, *,
                        broadcasts: int = 0, broadcast_us: float | None = None) -> float:
    """Per-all-reduce latency that fits a verify budget; negative means impossible even at 0 us. The
    broadcasts cost `broadcast_us` each, or (None) what an all-reduce does."""
    if broadcast_us is None:
        return (budget_ms - compute_ms - overhead_ms) * 1000.0 / (n_allreduce + broadcasts)
    return (budget_ms - compute_ms - overhead_ms - broadcasts * broadcast_us / 1000.0) * 1000.0 / n_allreduce


@dataclass(frozen=True)
class Step:
    """What is known of one speculative step besides its verify time; None: not given."""

    draft_ms: float = 0.0
    overhead_ms: float = 0.0
    accept_len: float | None = None
    compute_ms: float | None = None
    allreduces: int | None = None  # the target forward's collectives (Collectives.decode)
    broadcasts: int = 0  # the verify's own (Collectives.verify)
    broadcast_us: float | None = None  # None: what an all-reduce costs

    def verify_ms(self, allreduce_us: float) -> float:
        """Verify time from its parts (needs compute_ms and allreduces)."""
        assert self.compute_ms is not None and self.allreduces is not None
        return verify_ms(self.compute_ms, self.allreduces, allreduce_us, self.overhead_ms,
                         broadcasts=self.broadcasts, broadcast_us=self.broadcast_us)

    def collectives_ms(self, allreduce_us: float | None) -> tuple[float | None, float | None]:
        """(decode collectives ms, verify collectives ms) at this all-reduce latency; None where unknown."""
        decode = None if allreduce_us is None or self.allreduces is None else self.allreduces * allreduce_us / 1000.0
        bus = allreduce_us if self.broadcast_us is None else self.broadcast_us
        verify = 0.0 if not self.broadcasts else (None if bus is None else self.broadcasts * bus / 1000.0)
        return decode, verify


def scenario(
    label: str,
    step: Step,
    *,
    baseline: float | None,
    verify: float,
    allreduce_us: float | None,
    source: str = "",
    target_tokps: float | None = None,
) -> Scenario:
    """One verify time's predictions: cycle, spec tok/s, speed-up and break-even against the baseline."""
    accept = step.accept_len
    spec = round(spec_tokps(accept, step.draft_ms, verify), 3) if accept else None
    decode_ms, verify_coll_ms = step.collectives_ms(allreduce_us)
    out = Scenario(
        label=label,
        allreduce_us=None if allreduce_us is None else round(allreduce_us, 3),
        allreduce_source=source,
        verify_ms=round(verify, 4),
        decode_collectives=step.allreduces,
        verify_collectives=step.broadcasts,
        decode_collectives_ms=None if decode_ms is None else round(decode_ms, 4),
        verify_collectives_ms=None if verify_coll_ms is None else round(verify_coll_ms, 4),
        cycle_ms=round(step.draft_ms + verify, 4),
        spec_tokps=spec,
        baseline_tokps=None if baseline is None else round(baseline, 3),
        breakeven_accept_len=None if baseline is None else round(breakeven_accept_len(baseline, step.draft_ms, verify), 4),
        speedup=round(spec / baseline, 4) if baseline and spec else None,
    )
    if target_tokps and accept:
        return out.model_copy(update={"target": target(step, target_tokps)})
    return out


def target(step: Step, target_tokps: float) -> Target:
    """The verify budget that reaches `target_tokps`, and the all-reduce latency it leaves when it can tell."""
    assert step.accept_len is not None
    budget = verify_budget_ms(target_tokps, step.accept_len, step.draft_ms)
    if step.compute_ms is None or step.allreduces is None:
        answer = (
            f"verify must take at most {budget:.2f} ms; give --compute-ms and --allreduces to turn that into an "
            "all-reduce latency"
        )
        return Target(target_tokps=target_tokps, verify_budget_ms=round(budget, 4), allreduce_us_needed=None,
                      answer=answer)
    needed = allreduce_us_within(budget, step.compute_ms, step.overhead_ms, step.allreduces,
                                 broadcasts=step.broadcasts, broadcast_us=step.broadcast_us)
    if needed < 0:
        answer = (
            f"impossible even at 0 µs per all-reduce: compute {step.compute_ms:g} ms + overhead "
            f"{step.overhead_ms:g} ms already exceeds the {budget:.2f} ms verify budget at accept length "
            f"{step.accept_len:g}"
        )
    else:
        also = ""
        if step.broadcasts:
            also = (f" (and each of the {step.broadcasts} broadcasts too)" if step.broadcast_us is None
                    else f" (with the {step.broadcasts} broadcasts at {step.broadcast_us:g} µs)")
        answer = f"each of the {step.allreduces} decode collectives (all-reduces, all-gather) must take at most {needed:.1f} µs{also}"
    return Target(target_tokps=target_tokps, verify_budget_ms=round(budget, 4),
                  allreduce_us_needed=round(needed, 3) if needed >= 0 else None, answer=answer)
