"""SIMULATED numerics: the stand-in's greedy decode with log-probabilities, as a real model's would move
under another all-reduce.

Every position of a reply has a known reference distribution (the chosen token, its log-probability and a
few alternatives, all from a hash of the prompt, the position and the decode's branch). A numerics model
then says what a profile's all-reduce does to it:

- ``reference``: nothing; the decode is the reference, token for token (the tokens are
  ``simulation.token_ids``'s, so texts are as they always were);
- ``reorder``: a correct reduction in another order: every log-probability moves by rounding noise (at most
  ``REORDER_NOISE`` nats). Where the top two tokens are a near-tie the noise can swap them, greedy decoding
  picks the other one, and from there on the decode follows another branch: the texts part ways;
- ``corrupt``: a broken reduction: the same noise, plus now and then (``CORRUPT_RATE``) a jump of
  ``CORRUPT_JUMP`` nats, half of them with a swap of tokens that were no near-tie.

These are invented figures in the shape of docs/evidence.md "Reduction order and greedy text" (a reordering
stays under the gate's thresholds with room, a corruption goes well over them); they are not measurements.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Numerics = Literal["reference", "reorder", "corrupt"]
TOP_N = 8  # alternatives known at each position (a request may ask for fewer)
NEAR_TIE_RATE = 0.01  # share of positions whose top two tokens are nearly tied
NEAR_TIE_GAP = 0.004  # nats between them there, at most
REORDER_NOISE = 0.01  # nats: the largest move of a log-probability under a reordered sum
CORRUPT_RATE = 1 / 40  # share of positions a broken reduction hits
CORRUPT_JUMP = (0.5, 2.0)  # nats: how far it moves the chosen token's log-probability there


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


def decode(prompt: str, count: int, numerics: Numerics, first_branch_tokens, vocab: int) -> list[Position]:
    """The first `count` positions of the reply under `numerics`. `first_branch_tokens(n)` gives the
    reference decode's token ids (simulation.token_ids); another branch hashes its own."""
    reference_ids = first_branch_tokens(count)
    out: list[Position] = []
    branch = ""
    for pos in range(count):
        token = reference_ids[pos] if branch == "" else int(_u("tok", prompt, pos, branch) * vocab)
        top = _reference(prompt, pos, branch, token, vocab)
        if numerics != "reference":
            top = [(t, lp + REORDER_NOISE * (2 * _u("noise", prompt, pos, branch, t) - 1)) for t, lp in top]
        if numerics == "corrupt" and _u("hit", prompt, pos, branch) < CORRUPT_RATE:
            lo, hi = CORRUPT_JUMP
            jump = lo + (hi - lo) * _u("jump", prompt, pos, branch)
            (t0, lp0), (t1, lp1) = top[0], top[1]
            if _u("swap", prompt, pos, branch) < 0.5:  # a token that was no near-tie wins
                top[0], top[1] = (t1, lp0 + 0.1), (t0, lp0 - jump)
            else:
                top[0] = (t0, lp0 - jump if lp0 - jump > lp1 else lp0 + jump / 4)
        top.sort(key=lambda kv: -kv[1])
        chosen, lp = top[0]
        out.append(Position(chosen, min(lp, 0.0), tuple(top)))
        if chosen != token:  # greedy took the other token: the reply continues on another branch
            branch = f"{branch}/{pos}:{chosen}"
    return out
