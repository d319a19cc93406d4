"""Paired by prompt, reported beside the decision (bench/tune/decision.py), never part of its rule.

The rule's interval resamples repeats: it says how sure the timing is on *these* prompts. Where the final's request rows are kept, `paired_by_prompt` adds, for
each correct finalist against the running plan, each prompt's request tok/s (output tokens / end-to-end
time, averaged over that prompt's final requests at the objective's concurrency) in one arm divided by the
other's, then the median of those per-prompt ratios with a percentile-bootstrap 95% interval that resamples
the *prompts* (seeded). It reads as "on a prompt like these, the finalist is x times as fast", and its width
shows how much the gain depends on which prompts are sent (with greedy EAGLE the accept length is nearly
fixed per prompt, so repeats alone cannot show that). It never changes the outcome: the winner rule, its
false-winner floor and its power are those of bench/tune/decision.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.client.request_record import RequestRecord
from bench.tune.bootstrap import CONFIDENCE, RESAMPLES


@dataclass(frozen=True)
class PairedByPrompt:
    """One finalist against another arm, prompt by prompt (module docstring): the median of the per-prompt
    ratios contender/other of `metric`, and its bootstrap interval over prompts."""

    contender: str
    other: str
    metric: str
    prompts: int  # prompts measured in both arms
    median_ratio: float
    ci_low: float
    ci_high: float
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0

    def describe(self) -> str:
        return (f"paired by prompt ({self.prompts} prompts, {self.metric}): {self.contender} / {self.other} median "
                f"ratio {self.median_ratio:.3f} ({self.confidence:.0%} interval {self.ci_low:.3f}..{self.ci_high:.3f})")


PAIRED_METRIC = "request tok/s"


def per_prompt_tokps(rows: Sequence[RequestRecord], concurrency: int | None = None) -> dict[str, float]:
    """Prompt id -> the mean request tok/s (completion tokens / end-to-end seconds) of its successful requests,
    at `concurrency` when given; a prompt with no such request is left out."""
    got: dict[str, list[float]] = {}
    for r in rows:
        if concurrency is not None and (r.concurrency or 1) != concurrency:
            continue
        n, e2e = r.completion_tokens, r.e2e_s
        if not r.ok or not r.prompt_id or not n or not e2e or e2e <= 0:
            continue
        got.setdefault(r.prompt_id, []).append(float(n) / float(e2e))
    return {k: float(np.mean(v)) for k, v in got.items()}


def paired_by_prompt(contender: Mapping[str, float], other: Mapping[str, float], *, names: tuple[str, str] = ("a", "b"),
                     metric: str = PAIRED_METRIC, seed: int = 0, resamples: int = RESAMPLES,
                     confidence: float = CONFIDENCE) -> PairedByPrompt | None:
    """The median per-prompt ratio contender/other (prompt id -> value in each) with its percentile-bootstrap
    interval over the prompts both arms have (resampled with replacement, seeded; deviations widened by
    sqrt(n/(n-1)) as in bench/tune/bootstrap.py); None with fewer than 2. With few prompts the interval is still a
    little narrow: it covered identical arms 90-93% of the time at 8 prompts, 94% at 16, 95% at 32
    (1,000 simulated pairs each)."""
    common = sorted(k for k in contender if k in other and other[k] > 0 and contender[k] > 0)
    if len(common) < 2:
        return None
    ratios = np.array([contender[k] / other[k] for k in common])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), (resamples, len(ratios)))
    centre = float(np.median(ratios))
    medians = centre + (np.median(ratios[idx], axis=1) - centre) * math.sqrt(len(ratios) / (len(ratios) - 1))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return PairedByPrompt(names[0], names[1], metric, len(common), centre, float(low), float(high),
                          resamples, confidence, seed)

