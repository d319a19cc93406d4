"""SIMULATED numerics: the stand-in's greedy decode with log-probabilities, as a real model's would move
under another all-reduce, and, in the MoE model, under another batch.

Every position of a reply has a known reference distribution (the chosen token, its log-probability and a
few alternatives, all from a hash of the prompt, the position and the decode's branch). A numerics model
then says what a profile's all-reduce does to it.

The dense model (``numerics_model: dense``, the default; nothing depends on the batch):

- ``reference``: nothing; the decode is the reference, token for token (the tokens are
  ``simulation.token_ids``'s, so texts are as they always were);
- ``reorder``: a correct reduction in another order: every log-probability moves by rounding noise (at most
  ``REORDER_NOISE`` nats). Where the top two tokens are a near-tie the noise can swap them, greedy decoding
  picks the other one, and from there on the decode follows another branch: the texts part ways;
- ``corrupt``: a broken reduction: the same noise, plus now and then (``CORRUPT_RATE``) a jump of
  ``CORRUPT_JUMP`` nats, half of them with a swap of tokens that were no near-tie.

These are invented figures in the shape of docs/evidence.md "Reduction order and greedy text" (a reordering
stays under the gate's thresholds with room, a corruption goes well over them); they are not measurements.

The MoE model (``numerics_model: moe``): a mixture-of-experts model's decode depends on the batch it runs in.
Requests that share a forward pass change the kernels' shapes and so the rounding (batch variance), and in a
MoE a last-bit change now and then swaps an expert a token is routed to, which moves a log-probability by far
more than rounding does. The batch of a position is the number of requests in flight when its pass runs
(engine.py ``Engine.generate``), padded up to a power of two as a pass replayed from a CUDA graph captured at
that size runs (``batch_bucket``: 1, 2, 4, 8, 16 ...; 5 to 8 requests in flight run as 8). Each source of
change below is one *draw*: Laplace noise of scale ``MOE_NOISE`` (times the source's scale) on every listed
log-probability, plus, at a share of positions (the routing rate), a routing flip that moves the chosen
token's log-probability up or down by ``MOE_ROUTE_MOVE`` nats (log-uniform) and each alternative's by up to
as much. A decode is the reference distribution plus:

- at a padded batch above 1, the batch's draw (rate ``MOE_ROUTE_RATE``), the same for every numerics: the
  reference at batch 1 is the dense reference exactly, the reference at batch 8 is not, and the two compared
  are the null a gate can measure on the host (a last-bit change at a near-tie also parts the texts);
- ``reference``: nothing more;
- ``reorder``: its own draw at that batch, ``MOE_REORDER_SCALE`` times the batch's, routing rate
  ``MOE_REORDER_ROUTE_RATE``: against the reference at the same batch about 1.2-1.3x the null's mean and p99
  change (the 24-layer MoE of docs/evidence/logprob-gate/ measured 1.3-1.5x and 1.1-1.3x), with routing flips large enough to pass today's 0.33-nat maximum, and texts parting at near-ties
  (now and then at a routing flip of a closer pair: gaps up to about 0.5);
- ``corrupt``: its own draw ``MOE_CORRUPT_SCALE`` times the batch's, plus the dense model's jumps at
  ``MOE_CORRUPT_RATE`` (half of them swapping tokens that were no near-tie): about 4x the null's mean and p99.

``corrupt_min_batch`` (settings.py) makes a profile's numerics ``corrupt`` at the positions whose padded batch
is at least that (a fault that shows only when requests share a forward), in either model.

These MoE figures are INVENTED, SIMULATED ones, shaped like a measurement on a GPU (a MoE of 64 routed
experts, top-8, at TP 8: the reference at another batch size gave a max change of 0.479 nats, p99 0.031 and
an exact-match rate of 0.84; a correct reordered all-reduce about 1.3x the null's mean change and 1.6x its p99,
max 0.26-0.51, flip gaps up to about 0.6; broken ones 2.5-5x the mean and 3.3-4.9x the p99). They are not
measurements, and nothing here runs a model. tests/testsupport/standin/test_moe_numerics.py measures what they give (64
prompts x 128 tokens: null mean 0.007, p99 0.034, max 0.39; reorder 1.15-1.3x; corrupt 3.9-4.2x). Unlike the
GPU's, the texts part more often (about 0.6 of the null's prompts agree to the end, not 0.84): the near-ties
are the dense model's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Numerics = Literal["reference", "reorder", "corrupt"]
NumericsModel = Literal["dense", "moe"]
TOP_N = 8  # alternatives known at each position (a request may ask for fewer)
NEAR_TIE_RATE = 0.01  # share of positions whose top two tokens are nearly tied
NEAR_TIE_GAP = 0.004  # nats between them there, at most
REORDER_NOISE = 0.01  # nats: the largest move of a log-probability under a reordered sum
CORRUPT_RATE = 1 / 40  # share of positions a broken reduction hits
CORRUPT_JUMP = (0.5, 2.0)  # nats: how far it moves the chosen token's log-probability there

# The MoE model (INVENTED figures, see the module docstring)
MOE_NOISE = 0.0065  # nats: Laplace scale of the batch's draw (mean |change| of one log-probability)
MOE_ROUTE_RATE = 0.005  # share of positions where the batch's draw swaps an expert a token is routed to
MOE_ROUTE_MOVE = (0.1, 0.5)  # nats: how far such a swap moves the chosen token's log-probability
MOE_REORDER_SCALE = 1.3  # a reordered all-reduce's noise, relative to the batch's
MOE_REORDER_ROUTE_RATE = 0.004  # and its routing flips
MOE_CORRUPT_SCALE = 4.0  # a broken all-reduce's noise, relative to the batch's
MOE_CORRUPT_RATE = CORRUPT_RATE / 10  # and its share of jumps (CORRUPT_JUMP)


@dataclass(frozen=True)
class Position:
    """One generated token: its id, its log-probability and the top alternatives, best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def _u(*parts: object) -> float:
    """A uniform number in [0, 1) from the parts: the same parts, the same number."""
    digest = hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def batch_bucket(batch: int) -> int:
    """The padded batch a pass with ``batch`` requests in flight runs at: the next power of two (at least 1)."""
    return 1 << (max(1, batch) - 1).bit_length()


def numerics_at(numerics: Numerics, batch: int, corrupt_min_batch: int | None) -> Numerics:
    """The numerics a position decoded with ``batch`` requests in flight gets: ``corrupt`` where the padded
    batch reaches ``corrupt_min_batch``, the profile's own otherwise."""
    if corrupt_min_batch is not None and batch_bucket(batch) >= corrupt_min_batch:
        return "corrupt"
    return numerics


def _reference(prompt: str, pos: int, branch: str, token: int, vocab: int) -> list[tuple[int, float]]:
    """The reference distribution at a position: `token` first, then TOP_N - 1 distinct alternatives."""
    lp = -(0.02 + 1.2 * _u("lp", prompt, pos, branch))
    near = _u("tie", prompt, pos, branch) < NEAR_TIE_RATE
    gap = NEAR_TIE_GAP * _u("gap", prompt, pos, branch) if near else 0.3 + 3.0 * _u("gap", prompt, pos, branch)
    top = [(token, lp)]
    seen = {token}
    k = 0
    while len(top) < min(TOP_N, vocab):
        alt = int(_u("alt", prompt, pos, branch, k) * vocab)
        k += 1
        if alt in seen:
            continue
        seen.add(alt)
        top.append((alt, lp - gap - 0.7 * (len(top) - 1)))
    return top


def _corrupt_jump(top: list[tuple[int, float]], key: tuple[object, ...], rate: float) -> None:
    """A broken reduction's jump at this position (in place), at `rate` of the positions `key` names."""
    if _u("hit", *key) >= rate:
        return
    lo, hi = CORRUPT_JUMP
    jump = lo + (hi - lo) * _u("jump", *key)
    (t0, lp0), (t1, lp1) = top[0], top[1]
    if _u("swap", *key) < 0.5:  # a token that was no near-tie wins
        top[0], top[1] = (t1, lp0 + 0.1), (t0, lp0 - jump)
    else:
        top[0] = (t0, lp0 - jump if lp0 - jump > lp1 else lp0 + jump / 4)


def _laplace(u: float) -> float:
    """A Laplace variate of scale 1 from a uniform one in [0, 1)."""
    v = u - 0.5
    return -math.copysign(math.log(max(1e-300, 1 - 2 * abs(v))), v)


def _draw(source: str, key: tuple[object, ...], top: list[tuple[int, float]], scale: float,
          route_rate: float) -> list[float]:
    """One source's change of each listed log-probability (MoE model): rounding noise, and now and then a
    routing flip that moves the chosen token (listed first) by MOE_ROUTE_MOVE and the others by up to as much."""
    moves = [scale * MOE_NOISE * _laplace(_u("noise", source, *key, t)) for t, _ in top]
    if _u("route", source, *key) < route_rate:
        lo, hi = MOE_ROUTE_MOVE
        move = lo * (hi / lo) ** _u("move", source, *key)
        moves[0] += move if _u("sign", source, *key) < 0.5 else -move
        for i in range(1, len(moves)):
            moves[i] += move * (2 * _u("route-alt", source, *key, top[i][0]) - 1)
    return moves


class Decoder:
    """A greedy decode, one position at a time, each at the batch its pass ran in (the engine's requests in
    flight then). ``reference_ids``: the reference decode's token ids (simulation.token_ids), as far as the
    decode may go; another branch hashes its own."""

    def __init__(self, prompt: str, numerics: Numerics, reference_ids: Sequence[int], vocab: int,
                 model: NumericsModel = "dense", corrupt_min_batch: int | None = None):
        self.prompt, self.numerics, self.reference_ids, self.vocab = prompt, numerics, reference_ids, vocab
        self.model, self.corrupt_min_batch = model, corrupt_min_batch
        self.pos = 0
        self.branch = ""

    def next(self, batch: int = 1) -> Position:
        prompt, pos, branch, vocab = self.prompt, self.pos, self.branch, self.vocab
        token = self.reference_ids[pos] if branch == "" else int(_u("tok", prompt, pos, branch) * vocab)
        top = _reference(prompt, pos, branch, token, vocab)
        numerics = numerics_at(self.numerics, batch, self.corrupt_min_batch)
        if self.model == "moe":
            top = self._moe(top, numerics, batch_bucket(batch))
        else:
            if numerics != "reference":
                top = [(t, lp + REORDER_NOISE * (2 * _u("noise", prompt, pos, branch, t) - 1)) for t, lp in top]
            if numerics == "corrupt":
                _corrupt_jump(top, (prompt, pos, branch), CORRUPT_RATE)
        top.sort(key=lambda kv: -kv[1])
        chosen, lp = top[0]
        self.pos += 1
        if chosen != token:  # greedy took the other token: the reply continues on another branch
            self.branch = f"{branch}/{pos}:{chosen}"
        # a log-softmax is never above 0 (SGLang's neither); a broken reduction's jump may push one here
        return Position(chosen, min(lp, 0.0), tuple((t, min(v, 0.0)) for t, v in top))

    def _moe(self, top: list[tuple[int, float]], numerics: Numerics, bucket: int) -> list[tuple[int, float]]:
        key = (self.prompt, self.pos, self.branch, bucket)
        moves = [0.0] * len(top)
        sources = []
        if bucket > 1:
            sources.append(("batch", 1.0, MOE_ROUTE_RATE))
        if numerics == "reorder":
            sources.append(("reorder", MOE_REORDER_SCALE, MOE_REORDER_ROUTE_RATE))
        elif numerics == "corrupt":
            sources.append(("corrupt", MOE_CORRUPT_SCALE, MOE_ROUTE_RATE))
        for source, scale, rate in sources:
            moves = [m + d for m, d in zip(moves, _draw(source, key, top, scale, rate), strict=True)]
        top = [(t, lp + m) for (t, lp), m in zip(top, moves, strict=True)]
        if numerics == "corrupt":
            _corrupt_jump(top, ("moe", *key), MOE_CORRUPT_RATE)
        return [(t, min(lp, 0.0)) for t, lp in top]


def decode(prompt: str, count: int, numerics: Numerics, first_branch_tokens: Callable[[int], Sequence[int]],
           vocab: int, *, model: NumericsModel = "dense", batch: int | Sequence[int] = 1,
           corrupt_min_batch: int | None = None) -> list[Position]:
    """The first `count` positions of the reply under `numerics`. `first_branch_tokens(n)` gives the
    reference decode's token ids (simulation.token_ids); another branch hashes its own. `batch`: the requests
    in flight at every position's pass, or one figure per position (the dense model uses it only for
    `corrupt_min_batch`)."""
    decoder = Decoder(prompt, numerics, first_branch_tokens(count), vocab, model, corrupt_min_batch)
    batches = [batch] * count if isinstance(batch, int) else list(batch)
    if len(batches) < count:
        raise ValueError(f"{len(batches)} batch sizes for {count} positions")
    return [decoder.next(batches[pos]) for pos in range(count)]
