"""The stand-in's ground truth: token schedule, timing and generated text, as pure functions.

How a request of ``N = max_new_tokens`` tokens is served (N is always reached: there is no EOS):

* Without speculation every chunk is one decode step carrying 1 token. There are N chunks;
  ``spec_verify_ct`` is 0.
* With speculation (any ``--speculative-algorithm``) every chunk is one verify pass. With
  ``A = accept_length`` held as an exact fraction, the cumulative token count after pass ``k``
  (1-based) is ``min(N, floor(k * A))``. So a pass carries ``floor(A)`` or ``ceil(A)`` tokens
  (2, 3, 2, 3 ... for A = 2.5), there are ``V = ceil(N / A)`` passes, and a request reports
  ``completion_tokens = N`` and ``spec_verify_ct = V``. The per-request accept length
  ``completion_tokens / spec_verify_ct`` therefore equals A exactly whenever ``N / A`` is a whole
  number: N = 64 with A = 2.0 gives 32 passes (2.0), N = 65 with A = 2.5 gives 26 passes (2.5), but
  N = 64 with A = 2.5 gives 26 passes (64 / 26 = 2.46).
  Unlike SGLang, the first chunk (at TTFT) counts as a verify pass too; this keeps A = 1.0
  representable, which ``corrupt_output`` needs.
* ``corrupt_output`` forces A = 1.0 and changes the text.
* Chunk ``k`` (0-based) is sent at ``t0 + ttft_ms + k * interval``, where ``t0`` is when the
  request was read and ``interval`` is ``verify_ms`` with speculation, else ``decode_ms``.
  Requests do not slow each other down (no batching model) unless ``batch_cost`` is above 0: then
  every chunk's interval is taken when the chunk before it is sent, from the requests running then
  (``batch_factor``), and under ``--speculative-adaptive`` from the steps the config's tier for that
  batch size gives (0 steps: a pass of 1 token at ``zero_step_interval_ms``, a 1-node verify plus the draft
  extend, not a decode step; engine.py ``Engine.pass_figures``).
  As in SGLang 0.5.23 such a pass still counts in ``spec_verify_ct``: at 0 steps the EAGLE worker verifies
  a 1-node tree rooted at the last token (``eagle_worker_v2.py:1469-1472, 1678-1685``) and the result is
  committed like any verify (``batch_result_processor.py:829-832``), so it lowers the accept length.

Each verify pass is also counted by its correct drafts, as SGLang 0.5.23's ``spec_correct_drafts_histogram``
(``count_verify``): a chunk of ``c`` tokens is one verify with ``c - 1`` correct drafts (the bonus token
excluded), the last chunk cut short by ``max_new_tokens`` included at what it carried, so the histogram sums to
``spec_verify_ct`` and its weighted sum is ``completion_tokens - spec_verify_ct`` (``spec_num_correct_drafts``).
It has one bin per draft token (0 .. D - 1), more only when an adaptive tier's longer chain accepts more.

The lifetime ``avg_spec_accept_length`` in /server_info is total tokens over total verify passes of
all chunks sent so far, which (SGLang-like) is cumulative since start.

EAGLE speculation parameters (``--speculative-algorithm EAGLE``/``EAGLE3`` with all of
``--speculative-num-steps S``, ``--speculative-eagle-topk K``, ``--speculative-num-draft-tokens D``;
``eagle_point_figures``): the settings' ``verify_ms`` and ``accept_length`` are the figures at the
reference point (3, 1, 4), the eagle3 overlay's, and are used unchanged there. Another point scales them:

* verify cost grows with the steps: a pass is one target verify forward plus S draft forwards, each
  draft forward costing ``DRAFT_STEP_SHARE`` (0.25) of the target's, so
  ``verify_ms(S) = verify_ms * (1 + 0.25 S) / (1 + 0.25 * 3)``;
* accepted tokens grow with the draft tokens and saturate: the i-th draft token beyond the first is
  accepted with a chance that falls geometrically (``ACCEPT_DECAY`` 0.6), so
  ``A(D) = 1 + (accept_length - 1) * (1 - 0.6^(D-1)) / (1 - 0.6^3)``, at most D, and at most
  ``1 + (accept_length - 1) / (1 - 0.6^3)`` however large D is;
* top-k is not modelled (SGLang's own checks on it are the plan's, launcher/profiles/rules/speculation.py).

Throughput goes as ``A / verify_ms``, so the optimum is not the largest point: with the defaults
(accept_length 2.0) (1,1,2) and (2,1,3) beat (3,1,4) by about 6 %, and (7,1,8) is about 29 % slower.
A non-EAGLE algorithm (NGRAM) keeps the settings' figures.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

from testsupport.standin.settings import StandinSettings

# A small fixed vocabulary: each generated token is " " + one of these words.
VOCAB: tuple[str, ...] = tuple(
    """alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar
    papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basalt cobalt
    dune ember fjord glacier harbor island jungle kelp lagoon meadow nebula orchid prairie quartz
    river summit tundra valley willow zephyr anchor beacon canyon eddy estuary forest grove
    heath inlet jetty knoll ledge marsh""".split()
)

_CORRUPT_SALT = "corrupt"
_CLEAN_SALT = "clean"


REFERENCE_POINT = (3, 1, 4)  # (steps, topk, draft tokens) the settings' verify_ms and accept_length describe
DRAFT_STEP_SHARE = 0.25  # one draft forward's cost, as a share of the target's verify forward
ACCEPT_DECAY = 0.6  # each further draft token is accepted with this much less chance than the one before


def eagle_point_figures(verify_ms: float, accept_length: float, point: tuple[int, int, int] | None) -> tuple[float, float]:
    """``(verify_ms, accept_length)`` at an EAGLE point ``(steps, topk, draft_tokens)`` from the figures at
    REFERENCE_POINT (the module docstring gives the model); the figures unchanged at it or for None."""
    if point is None:
        return verify_ms, accept_length
    steps, _topk, draft = point
    ref_steps, _, ref_draft = REFERENCE_POINT
    if (steps, draft) == (ref_steps, ref_draft):
        return verify_ms, accept_length
    verify = verify_ms * (1 + DRAFT_STEP_SHARE * steps) / (1 + DRAFT_STEP_SHARE * ref_steps)
    gain = (1 - ACCEPT_DECAY ** (max(draft, 1) - 1)) / (1 - ACCEPT_DECAY ** (ref_draft - 1))
    accept = min(float(max(draft, 1)), 1 + (accept_length - 1) * gain)
    return verify, max(1.0, round(accept, 6))


def batch_factor(batch_cost: float, batch: int, tokens: int) -> float:
    """How much longer one forward pass takes with ``batch`` requests running, each carrying ``tokens`` tokens
    (1 decoding; the draft tokens when verifying), than with one: ``1 + batch_cost * (batch - 1) * tokens``.
    Speculation's extra tokens then cost more as the batch grows, so the best EAGLE steps fall with the
    concurrency, to none at all: the shape that makes per-batch-size tiers pay (SIMULATED, no hardware)."""
    return 1.0 + batch_cost * max(0, batch - 1) * max(1, tokens)


def dynamic_chunks(max_new_tokens: int, ttft_ms: float, figures):
    """The chunks of one request when each pass's figures may change while it runs: yields
    ``(tokens, offset_s, speculative)``, asking ``figures()`` -> ``(speculative, accept_length, interval_ms)``
    before each chunk. With constant figures this is ``chunk_token_counts`` and ``chunk_offsets_s`` exactly:
    the tokens after a speculative pass are the floor of the accepted tokens so far."""
    if max_new_tokens <= 0:
        yield 0, ttft_ms / 1000.0, False
        return
    acc, done, offset_ms = Fraction(0), 0, ttft_ms
    while done < max_new_tokens:
        speculative, accept, interval_ms = figures()
        acc = max(acc, Fraction(done)) + (accept_fraction(accept) if speculative else 1)
        total = min(max_new_tokens, math.floor(acc))
        yield total - done, offset_ms / 1000.0, speculative
        done = total
        offset_ms += interval_ms


def accept_fraction(accept_length: float) -> Fraction:
    """The accept length as an exact fraction, so the schedule has no float rounding surprises."""
    if accept_length < 1:
        raise ValueError(f"accept_length must be >= 1, got {accept_length}")
    return Fraction(accept_length).limit_denominator(1_000_000)


def effective_accept_length(settings: StandinSettings, speculative: bool,
                            point: tuple[int, int, int] | None = None) -> float:
    """Tokens per chunk the server will use: 1.0 without speculation or with corrupt output; at an
    EAGLE ``point`` the settings' figure scaled by ``eagle_point_figures``."""
    if not speculative or settings.corrupt_output:
        return 1.0
    return eagle_point_figures(settings.verify_ms, settings.accept_length, point)[1]


def verify_interval_ms(settings: StandinSettings, point: tuple[int, int, int] | None = None) -> float:
    """One verify pass's interval: the settings' ``verify_ms``, scaled at an EAGLE ``point``."""
    return eagle_point_figures(settings.verify_ms, settings.accept_length, point)[0]


def zero_step_interval_ms(settings: StandinSettings) -> float:
    """A 0-step adaptive pass: no drafting, but one 1-node verify forward through the target-verify graph and the
    draft model's extend forward (SGLang 0.5.23, eagle_worker_v2.py:1469-1504): the verify model above at S = 0
    plus one draft forward, ``verify_ms * (1 + 0.25) / (1 + 0.25 * 3)``; not the decode step of ``off``."""
    ref_steps = REFERENCE_POINT[0]
    return settings.verify_ms * (1 + DRAFT_STEP_SHARE) / (1 + DRAFT_STEP_SHARE * ref_steps)


def chunk_token_counts(max_new_tokens: int, accept_length: float, speculative: bool) -> list[int]:
    """Tokens carried by each chunk of one request, in order (the exact schedule the server follows)."""
    if max_new_tokens <= 0:
        return []
    if not speculative:
        return [1] * max_new_tokens
    a = accept_fraction(accept_length)
    counts: list[int] = []
    done = 0
    k = 0
    while done < max_new_tokens:
        k += 1
        total = min(max_new_tokens, math.floor(k * a))
        counts.append(total - done)
        done = total
    return counts


def count_verify(histogram: list[int], tokens: int) -> None:
    """One verify pass that committed ``tokens`` tokens: bin ``tokens - 1`` (its correct drafts, the bonus token
    excluded) gains 1, the histogram grown to reach it when a pass accepts more than it has bins."""
    correct = max(0, tokens - 1)
    histogram.extend([0] * (correct + 1 - len(histogram)))
    histogram[correct] += 1


def correct_drafts_histogram(counts: list[int], draft_tokens: int) -> list[int]:
    """The histogram a request of these chunk token counts reports (every chunk with tokens is a verify)."""
    histogram = [0] * max(1, draft_tokens)
    for count in counts:
        if count:
            count_verify(histogram, count)
    return histogram


def expected_counts(max_new_tokens: int, accept_length: float, speculative: bool) -> tuple[int, int]:
    """The truth a request reports: ``(completion_tokens, spec_verify_ct)``.

    ``spec_verify_ct`` is ``ceil(N / A)`` with speculation and 0 without.
    """
    n = max(0, max_new_tokens)
    if not speculative or n == 0:
        return n, 0
    return n, math.ceil(Fraction(n) / accept_fraction(accept_length))


def chunk_offsets_s(n_chunks: int, ttft_ms: float, interval_ms: float) -> list[float]:
    """When each chunk is due, in seconds after the request was read."""
    return [(ttft_ms + k * interval_ms) / 1000.0 for k in range(n_chunks)]


def prompt_token_count(prompt: str) -> int:
    """Simulated prompt length: whitespace-separated words, at least 1 (a BOS token)."""
    return max(1, len(prompt.split()))


def token_ids(prompt: str, count: int, corrupt: bool = False, start: int = 0) -> list[int]:
    """Deterministic token ids for positions ``start .. start+count-1`` of the reply to ``prompt``."""
    salt = _CORRUPT_SALT if corrupt else _CLEAN_SALT
    ids = []
    for pos in range(start, start + count):
        digest = hashlib.blake2b(f"{salt}\x00{prompt}\x00{pos}".encode(), digest_size=4).digest()
        ids.append(int.from_bytes(digest, "big") % len(VOCAB))
    return ids


def detokenize(ids: list[int]) -> str:
    """Text of the given token ids: each token is a space and one vocabulary word."""
    return "".join(" " + VOCAB[i] for i in ids)


def generated_text(prompt: str, max_new_tokens: int, corrupt: bool = False) -> str:
    """The whole reply the stand-in gives to ``prompt`` (greedy-like: same prompt, same text)."""
    return detokenize(token_ids(prompt, max_new_tokens, corrupt))


def expected_tokps(settings: StandinSettings, speculative: bool, point: tuple[int, int, int] | None,
                   max_new_tokens: int) -> float:
    """The output tok/s one request of ``max_new_tokens`` gets at concurrency 1: its tokens over the time
    from arrival to the last chunk (TTFT plus one interval per further chunk). The truth `bench tune` on
    the demo must find the best of."""
    accept = effective_accept_length(settings, speculative, point)
    interval = verify_interval_ms(settings, point) if speculative else settings.decode_ms
    chunks = len(chunk_token_counts(max_new_tokens, accept, speculative))
    total_ms = settings.ttft_ms + max(0, chunks - 1) * interval
    return max_new_tokens / total_ms * 1000.0 if total_ms > 0 else float("inf")
