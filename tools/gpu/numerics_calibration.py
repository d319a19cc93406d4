"""Calibrate the log-probability correctness gate (bench/run/logprob_gate.py) on one GPU, on a dense model
and on a DeepSeek-V3 / Kimi-K2-style mixture-of-experts model.

What it reproduces: tensor parallelism splits each row-parallel layer (attention output, MLP down, a whole
MoE block) into TP partial sums, one per GPU, that an all-reduce adds. Correct all-reduces add them in
different orders (a ring, a tree, a one-shot kernel that sums in fp32 and rounds once), and bf16 rounding
then differs in the last bits; so does a server that batches the same requests differently. Broken ones drop
a partial, add one twice, read a stale one, or read another request's row. This script trains a small
byte-level GPT for a fixed time, decodes held-out prompts greedily with each reduction, and writes every
decode's top-k log-probabilities (the raw data a calibration is made from) with the gate's statistics of
each against the ring (NCCL's default), computed by the exact code the bench gates with.

No NCCL and no second GPU: the TP ranks' partial sums are computed on the one GPU, shard by shard, each
rounded to bf16 as a GPU's output would be, and reduced in software in the order named (the ring exactly as
a ring reduce-scatter adds: chunk c accumulated from rank c+1 on, each hop's sum rounded to bf16).

The MoE model (--model moe): every MLP is a block of --experts routed experts (SwiGLU, --expert-inter wide)
of which a token uses --top-k-experts, plus one always-on shared expert. Router scores are the sigmoid of an
fp32 gate matmul; an auxiliary-loss-free selection bias (trained by DeepSeek-V3's rule, bias += u *
sign(mean load - load) after each step) is added to the scores only to choose the experts; the weights are
the chosen unbiased scores normalised over the chosen ones and scaled by --routed-scale. Each expert (and
the shared one) is split TP ways along its intermediate dim, so each rank's partial is its shard of every
chosen expert (each expert's output rounded to bf16, weighted sum in fp32, rounded once, as SGLang's fused
MoE does) plus its shard of the shared expert: one all-reduce per MoE block.

    # what docs/evidence/logprob-gate/ holds (288 s and 193 s on one H200):
    python3 tools/gpu/numerics_calibration.py --model moe --fault-scan --budget-s 530 --new-tokens 128 \
        --sub-batches 16,64 --seeds 5 --seeds-broken 3 --out "$OUT"
    python3 tools/gpu/numerics_calibration.py --model dense --fault-scan --budget-s 400 --new-tokens 128 \
        --sub-batches 16,64 --seeds 5 --seeds-broken 3 --out "$OUT"
    python3 tools/gpu/numerics_calibration.py --smoke-cpu --model moe --out /tmp/calib  # tiny, the CPU: ~1 min

Each run of --seeds: its own --prompts held-out prompts, decoded (--new-tokens greedy tokens, KV cache) by
the correct variants ring (the reference), tree, oneshot, ring-again and the ring at each --sub-batches
decode batch (ring@64 and ring@32 by default; tools/gate_calibration.py takes the first one listed as the
null, the reference against itself at another batch size); the first --seeds-broken seeds also by the broken stale, drop, double and
crosstalk; with --fault-scan, seed 0 also by drop@1000, drop@5000 and stale@512 (rarer faults). Seed 0's
variants also get the held-out loss. Decode steps are CUDA graphs (--graphs off: eager, slower).
--budget-s drops the seeds that would not fit; the .npz is kept under --max-npz-mib by decoding fewer seeds
(measured on seed 0: a run of 128 prompts x 192 tokens x top-5 compresses to about 0.45 MiB, so about 3 seeds
fit 15 MiB; --new-tokens 128 fits 5). Either is said in the output and in the .json's "notes".

Writes to --out, per model `<model>-<layers>` (e.g. moe-8, moe-24):
  <name>.npz   for each run key `<variant>.s<seed>` (ring.s0, ring@64.s3, drop@1000.s0, ...): `<key>.top_ids`
               uint8 [P, T, K] and `<key>.top_lp` float32 [P, T, K], the top-K token ids (bytes) and fp32
               log-softmax values at each generated position, best first (the greedy token is [..., 0])
  <name>.json  {"model", "layers", "settings", "train_steps", "train_loss", "runs": {key: {"variant", "seed",
               "correct", "batch", "fault": {"kind", "rate", "unit", "hits", ...} | null, "reductions",
               "held_out_loss", "decode_s" (graph capture included), "capture_s", "scan"}}, "notes", ...}
and summary.txt (the gate's statistics of every run against ring.s<its seed>), calibration.json (those
statistics and the thresholds they imply, as the committed docs/evidence/logprob-gate/ one), log.txt.
"""

from __future__ import annotations

import time

T_START = time.monotonic()

import argparse  # noqa: E402
import copy  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import zlib  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS: one order, one result

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.run import logprob_gate as gate  # noqa: E402  (standard library only)

DEVICE = torch.device("cuda")
BF16 = torch.bfloat16
SIZES = {"tp": 8, "d-model": 512, "heads": 8, "ctx": 256, "batch": 64, "train-s": 60.0, "prompts": 128,
         "prompt-len": 64, "new-tokens": 192, "top-k": 5, "corpus-bytes": 48_000_000,
         "seeds": 5, "seeds-broken": 3, "batch-decode": 128, "sub-batches": "64,32", "held-rows": 512,
         "experts": 64, "top-k-experts": 8, "expert-inter": 128, "shared-inter": 128, "routed-scale": 2.5,
         "bias-update": 1e-3, "budget-s": 480.0, "max-npz-mib": 15.0}
SMOKE = {"d_model": 32, "heads": 4, "ctx": 32, "batch": 8, "train_s": 3.0, "prompts": 8, "prompt_len": 8,
         "new_tokens": 8, "corpus_bytes": 1_500_000, "seeds": 2, "seeds_broken": 1, "batch_decode": 4,
         "sub_batches": "2", "held_rows": 16, "experts": 8, "top_k_experts": 2, "expert_inter": 16,
         "shared_inter": 16, "layers": "2,3", "fault_scan": True, "budget_s": 600.0}  # bf16 is slow on a CPU
FAULT_RATE = {"stale": 64, "drop": 200, "double": 200, "crosstalk": 100}  # 1 row in 64; 1 call in 200, 100
FAULT_UNIT = {"stale": "row", "drop": "call", "double": "call", "crosstalk": "call"}
SCAN = (("drop", 1000), ("drop", 5000), ("stale", 512))
NO_FAULT = np.zeros(0)


def say(*a, **k) -> None:
    print(*a, **k, flush=True)


# ----- data: the repository's own text, bytes -------------------------------------------------------
def corpus(limit: int) -> bytes:
    """This repository's text, then the Python standard library's sources, up to `limit` bytes: enough
    text that a minute of training does not memorise it (held-out loss close to training loss)."""
    parts, size = [], 0
    roots = [(REPO, ("**/*.md", "**/*.py", "**/*.toml")), (Path(sysconfig.get_paths()["stdlib"]), ("**/*.py",))]
    for root, patterns in roots:
        for pattern in patterns:
            for p in sorted(root.glob(pattern)):
                if {".venv", ".git", "site-packages"} & set(p.parts) or not p.is_file():
                    continue
                parts.append(p.read_bytes())
                size += len(parts[-1])
                if size >= limit:
                    return b"\n".join(parts)
    return b"\n".join(parts)


# ----- the reductions and their faults --------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str  # ring, tree, oneshot, ring-again, ring@64, stale, drop@1000, ...
    order: str  # ring | tree | oneshot: the order the partial sums are added in
    batch: int  # decode batch: the prompts go through in sub-batches of this many
    fault: str | None = None  # stale | drop | double | crosstalk
    rate: int = 0  # the fault hits 1 call (1 row, for stale) in `rate`
    scan: bool = False  # a detection-limit run (--fault-scan), not a default-rate fault

    @property
    def correct(self) -> bool:
        return self.fault is None

    @property
    def fault_class(self) -> str | None:  # faults of one class share a decode graph; the rate is data
        return "scale" if self.fault in ("drop", "double") else self.fault


def variants(seed: int, args: argparse.Namespace) -> list[Variant]:
    b = args.batch_decode
    out = [Variant("ring", "ring", b), Variant("tree", "tree", b), Variant("oneshot", "oneshot", b),
           Variant("ring-again", "ring", b)]
    out += [Variant(f"ring@{sb}", "ring", sb) for sb in args.sub_batch_list]
    if seed < args.seeds_broken:
        out += [Variant(k, "ring", b, k, FAULT_RATE[k]) for k in ("stale", "drop", "double", "crosstalk")]
    if seed == 0 and args.fault_scan:
        out += [Variant(f"{k}@{r}", "ring", b, k, r, scan=True) for k, r in SCAN]
    return out


def fault_plan(v: Variant, rng: np.random.Generator, steps: int, sites: int, rows: int, tp: int,
               first: bool) -> tuple[np.ndarray, int]:
    """Which reduction calls the fault hits, for `steps` forward passes of `sites` reductions each over
    `rows` rows: drop/double, a scale per rank (1, or 0 / 2 for the rank hit); crosstalk, the rank whose
    partial is read one row off; stale, the rows of rank 1's buffer that still hold the previous call's
    values (a random phase per call, so 1 row in `rate` on average, spread over the requests; none on the
    first call of a shape, which has no previous call). Returns the plan and how many hits it holds."""
    if v.fault in ("drop", "double", "crosstalk"):
        hit = rng.integers(0, v.rate, size=(steps, sites)) == 0
        rank = rng.integers(0, tp, size=(steps, sites))
        ii, jj = np.nonzero(hit)
        if v.fault == "crosstalk":
            plan = np.zeros((steps, sites, tp), dtype=bool)
            plan[ii, jj, rank[ii, jj]] = True
        else:
            plan = np.ones((steps, sites, tp), dtype=np.float32)
            plan[ii, jj, rank[ii, jj]] = 0.0 if v.fault == "drop" else 2.0
        return plan, int(hit.sum())
    off = rng.integers(0, v.rate, size=(steps, sites))
    plan = (np.arange(rows)[None, None, :] - off[..., None]) % v.rate == 0
    if first:
        plan[0, 0] = False
    return plan, int(plan.sum())


class Reducer:
    """Adds the TP partial sums P [tp, rows, D] (bf16, one slab per rank) in one order, after the fault of
    the current forward pass's plan row (begin()) hit them, if any. Vectorised: each ring hop is one add
    over all chunks, the same arithmetic as adding chunk by chunk."""

    def __init__(self, order: str, fault_class: str | None, tp: int, device: torch.device):
        self.order, self.fault_class, self.tp = order, fault_class, tp
        i, c = torch.arange(tp)[:, None], torch.arange(tp)[None, :]
        self.ring_rank = ((c + 1 + i) % tp).to(device)  # hop i of chunk c adds rank (c + 1 + i) % tp
        self.ring_chunk = c.to(device)
        self.row: torch.Tensor | None = None
        self.site = 0
        self.prev: dict[int, torch.Tensor] = {}  # stale: rank 1's buffer, by rows

    def begin(self, row: torch.Tensor | None) -> None:
        """A forward pass starts: its plan row (one entry per reduction call), and the call count restarts."""
        self.row, self.site = row, 0

    def __call__(self, P: torch.Tensor) -> torch.Tensor:
        site = self.site
        self.site += 1
        if self.fault_class is not None:
            P = self.corrupt(P, self.row[site])
        return self.reduce(P)

    def corrupt(self, P: torch.Tensor, hit: torch.Tensor) -> torch.Tensor:
        if self.fault_class == "scale":  # a rank's partial lost (x0) or added twice (x2); x1 is exact
            return P * hit.view(-1, 1, 1)
        if self.fault_class == "crosstalk":  # a rank's partial for each row read from the next row's slot
            return torch.where(hit.view(-1, 1, 1), P.roll(-1, dims=1), P)
        rows = P.shape[1]  # stale: rows of rank 1 that still hold the previous call's values
        prev = self.prev.get(rows)
        if prev is None:
            prev = self.prev[rows] = torch.zeros_like(P[1])
        cur = P[1]
        old = torch.where(hit.view(-1, 1), prev, cur)
        prev.copy_(cur)
        return torch.cat([P[:1], old[None], P[2:]])

    def reduce(self, P: torch.Tensor) -> torch.Tensor:
        if self.order == "oneshot":  # fp32 sum, one rounding
            return P.float().sum(0).to(P.dtype)
        if self.order == "tree":  # pairs (0+1), (2+3), ... level by level, each sum rounded
            level = P
            while level.shape[0] > 1:
                m = level.shape[0]
                s = level[0:m - m % 2:2] + level[1::2]
                level = s if m % 2 == 0 else torch.cat([s, level[-1:]])
            return level[0]
        # ring reduce-scatter: chunk c accumulated from rank c+1 on, each hop's sum rounded to bf16; then
        # all-gathered (the chunks side by side)
        n, rows, D = P.shape
        Q = P.reshape(n, rows, n, D // n)[self.ring_rank, :, self.ring_chunk]  # [hop, chunk, rows, D/n]
        acc = Q[0]
        for i in range(1, n):
            acc = acc + Q[i]
        return acc.transpose(0, 1).reshape(rows, D)


def ring_reference(parts: list[torch.Tensor]) -> torch.Tensor:
    """The ring added chunk by chunk, as the script did before it was vectorised (a self-test's reference)."""
    n = len(parts)
    chunks = [p.chunk(n, dim=-1) for p in parts]
    out = []
    for c in range(n):
        acc = chunks[(c + 1) % n][c]
        for i in range(2, n + 1):
            acc = acc + chunks[(c + i) % n][c]
        out.append(acc)
    return torch.cat(out, dim=-1)


# ----- the model ------------------------------------------------------------------------------------
class MoE(torch.nn.Module):
    """Routed experts (SwiGLU) plus one shared expert; see the module docstring."""

    def __init__(self, d: int, experts: int, top_k: int, inter: int, shared: int, scale: float):
        super().__init__()
        self.d, self.E, self.k, self.I, self.Ish, self.scale = d, experts, top_k, inter, shared, scale
        self.router = torch.nn.Linear(d, experts, bias=False)
        self.register_buffer("bias", torch.zeros(experts))  # selection only (aux-loss-free balancing)

        def u(*shape, fan_in):
            return torch.nn.Parameter(torch.empty(*shape).uniform_(-fan_in ** -0.5, fan_in ** -0.5))
        self.wg, self.wu, self.wd = u(d, experts * inter, fan_in=d), u(d, experts * inter, fan_in=d), \
            u(experts * inter, d, fan_in=inter)
        self.sg, self.su, self.sd = u(d, shared, fan_in=d), u(d, shared, fan_in=d), u(shared, d, fan_in=shared)
        self.load: torch.Tensor | None = None
        self.rows: dict[int, torch.Tensor] = {}

    def route(self, x2: torch.Tensor, weight_t: torch.Tensor):
        with torch.autocast(x2.device.type, enabled=False):
            s = torch.sigmoid(x2.float() @ weight_t)  # fp32 gate matmul (router weight and input in fp32)
        idx = (s.detach() + self.bias).topk(self.k, dim=-1).indices  # the bias only chooses
        w = s.gather(1, idx)
        return idx, w / w.sum(-1, keepdim=True) * self.scale  # unbiased scores, normalised, scaled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training: every expert computed, unchosen ones weighted 0 (exact, and fast at this size)."""
        shape, x2 = x.shape, x.reshape(-1, self.d)
        n = x2.shape[0]
        idx, w = self.route(x2, self.router.weight.float().t())
        wf = torch.zeros(n, self.E, device=x.device, dtype=w.dtype).scatter(1, idx, w)
        if self.training:
            self.load = (wf.detach() != 0).sum(0).float()
        h = F.silu(x2 @ self.wg) * (x2 @ self.wu)
        h = (h.view(n, self.E, self.I) * wf.to(h.dtype).unsqueeze(-1)).view(n, self.E * self.I)
        shared = (F.silu(x2 @ self.sg) * (x2 @ self.su)) @ self.sd
        return (h @ self.wd + shared).view(shape)

    @torch.no_grad()
    def update_bias(self, u: float) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing: raise the bias of under-loaded experts."""
        if self.load is not None:
            self.bias += u * torch.sign(self.load.mean() - self.load)

    def prepare_tp(self, tp: int) -> None:
        """The TP layouts of the (inference-dtype) weights: rank-major shards of every expert."""
        d, E, Is, Iss = self.d, self.E, self.I // tp, self.Ish // tp
        self.tp = tp
        self.router_t = self.router.weight.float().t().contiguous()
        gu = torch.stack([self.wg.view(d, E, tp, Is), self.wu.view(d, E, tp, Is)], dim=3)  # [d, E, tp, 2, Is]
        self.gu_tp = gu.permute(0, 2, 1, 3, 4).reshape(d, tp * E * 2 * Is).contiguous()
        self.d_tp = self.wd.view(E, tp, Is, d).permute(1, 0, 2, 3).reshape(tp * E, Is, d).contiguous()
        sgu = torch.stack([self.sg.view(d, tp, Iss), self.su.view(d, tp, Iss)], dim=2)  # [d, tp, 2, Iss]
        self.sgu_tp = sgu.reshape(d, tp * 2 * Iss).contiguous()
        self.sd_tp = self.sd.view(tp, Iss, d).contiguous()
        self.chunk = max(1, 2 ** 31 // (tp * E * d * 2))  # tokens per pass: the per-expert outputs stay < 2 GiB

    def forward_tp(self, x: torch.Tensor, reduce: Reducer) -> torch.Tensor:
        shape, x2 = x.shape, x.reshape(-1, self.d)
        idx, w = self.route(x2, self.router_t)
        n = x2.shape[0]
        parts = [self.partials(x2[a:a + self.chunk], idx[a:a + self.chunk], w[a:a + self.chunk])
                 for a in range(0, n, self.chunk)]
        P = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return reduce(P).view(shape)

    def partials(self, x2: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Every rank's partial [tp, n, d]: its shard of each chosen expert, each expert's output rounded to
        the model's dtype, weighted and summed in fp32 and rounded once, plus its shard of the shared one."""
        n, tp, E, d = x2.shape[0], self.tp, self.E, self.d
        gu = (x2 @ self.gu_tp).view(n, tp * E, 2, -1)
        h = F.silu(gu[:, :, 0]) * gu[:, :, 1]  # [n, tp*E, Is]
        y = torch.bmm(h.transpose(0, 1), self.d_tp).view(tp, E, n, d)  # each expert's output, every rank
        rows = self.rows.get(n)
        if rows is None:
            rows = self.rows[n] = torch.arange(n, device=x2.device)[:, None]
        chosen = y[:, idx, rows]  # [tp, n, k, d]
        routed = (chosen.float() * w.unsqueeze(-1)).sum(2).to(x2.dtype)
        sgu = (x2 @ self.sgu_tp).view(n, tp, 2, -1)
        sh = F.silu(sgu[:, :, 0]) * sgu[:, :, 1]  # [n, tp, Iss]
        return routed + torch.bmm(sh.transpose(0, 1), self.sd_tp)


class GPT(torch.nn.Module):
    def __init__(self, layers: int, args: argparse.Namespace, vocab: int = 256):
        super().__init__()
        d = args.d_model
        self.d, self.heads, self.ctx, self.moe = d, args.heads, args.ctx, args.model == "moe"
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(args.ctx, d)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            b.qkv = torch.nn.Linear(d, 3 * d, bias=False)
            b.proj = torch.nn.Linear(d, d, bias=False)  # row-parallel
            if self.moe:
                b.moe = MoE(d, args.experts, args.top_k_experts, args.expert_inter, args.shared_inter,
                            args.routed_scale)  # row-parallel as a whole
            else:
                b.up = torch.nn.Linear(d, 4 * d, bias=False)
                b.down = torch.nn.Linear(4 * d, d, bias=False)  # row-parallel
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Training (and the fp32 self-test's reference): no tensor parallelism."""
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in b.qkv(b.ln1(x)).split(self.d, -1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b.proj(a.transpose(1, 2).reshape(B, T, self.d))
            h = b.ln2(x)
            x = x + (b.moe(h) if self.moe else b.down(F.gelu(b.up(h))))
        return self.head(self.lnf(x))

    def moe_blocks(self) -> list[MoE]:
        return [b.moe for b in self.blocks] if self.moe else []


class TPModel:
    """The trained model in inference dtype, its row-parallel layers computed as TP partial sums that a
    Reducer adds: full sequences (prefill, held-out loss) and one decode step against a static KV cache."""

    def __init__(self, model: GPT, tp: int, dtype: torch.dtype = BF16):
        biases = [m.bias.detach().clone() for m in model.moe_blocks()]
        self.m = model.to(dtype).eval()
        for m, b in zip(self.m.moe_blocks(), biases, strict=True):
            m.bias = b  # the selection bias stays fp32, as DeepSeek-V3 keeps it
            m.prepare_tp(tp)
        self.tp, self.d, self.H = tp, model.d, model.heads
        self.hd = model.d // model.heads
        self.proj_t = [self.shard(b.proj.weight) for b in model.blocks]
        self.down_t = [] if model.moe else [self.shard(b.down.weight) for b in model.blocks]

    def shard(self, w: torch.Tensor) -> torch.Tensor:  # [out, in] -> [tp, in/tp, out]
        return w.t().reshape(self.tp, w.shape[1] // self.tp, w.shape[0]).contiguous()

    def row_parallel(self, wt: torch.Tensor, x: torch.Tensor, reduce: Reducer) -> torch.Tensor:
        shape = x.shape
        xr = x.reshape(-1, self.tp, shape[-1] // self.tp).transpose(0, 1)  # [tp, rows, in/tp]
        return reduce(torch.bmm(xr, wt)).view(*shape[:-1], wt.shape[-1])

    def mlp(self, li: int, h: torch.Tensor, reduce: Reducer) -> torch.Tensor:
        b = self.m.blocks[li]
        if self.m.moe:
            return b.moe.forward_tp(h, reduce)
        return self.row_parallel(self.down_t[li], F.gelu(F.linear(h, b.up.weight)), reduce)

    def forward(self, idx: torch.Tensor, reduce: Reducer, kv: Runner | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Logits of a whole sequence from position 0 (the prefill writes its keys and values into kv)."""
        B, T = idx.shape
        m = self.m
        x = m.tok(idx) + m.pos(torch.arange(T, device=idx.device))
        for li, b in enumerate(m.blocks):
            q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in F.linear(b.ln1(x), b.qkv.weight).split(self.d, -1))
            if kv is not None:
                kv.k[li][:, :, :T].copy_(k)
                kv.v[li][:, :, :T].copy_(v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.row_parallel(self.proj_t[li], a.transpose(1, 2).reshape(B, T, self.d), reduce)
            x = x + self.mlp(li, b.ln2(x), reduce)
        if last_only:
            x = x[:, -1:]
        return F.linear(m.lnf(x), m.head.weight)

    def step(self, st: Runner, reduce: Reducer) -> torch.Tensor:
        """One decode step (the token st.tok at position st.pos) for the whole batch; logits [B, vocab].
        Every shape is static and nothing leaves the GPU, so a CUDA graph can hold it."""
        m, B = self.m, st.tok.shape[0]
        x = m.tok(st.tok) + m.pos(st.pos)  # [B, 1, d]
        mask = st.zero_bias.masked_fill(st.positions > st.pos, float("-inf"))  # [S]: keys not yet written
        for li, b in enumerate(m.blocks):
            q, k, v = F.linear(b.ln1(x), b.qkv.weight).view(B, 3, self.H, self.hd).unbind(1)  # [B, H, hd]
            st.k[li].index_copy_(2, st.pos, k.unsqueeze(2))
            st.v[li].index_copy_(2, st.pos, v.unsqueeze(2))
            att = torch.matmul(q.unsqueeze(2), st.k[li].transpose(-1, -2)).float() * self.hd ** -0.5 + mask
            a = torch.matmul(att.softmax(-1).to(x.dtype), st.v[li])  # [B, H, 1, hd]
            x = x + self.row_parallel(self.proj_t[li], a.reshape(B, 1, self.d), reduce)
            x = x + self.mlp(li, b.ln2(x), reduce)
        return F.linear(m.lnf(x), m.head.weight)[:, -1]


class Runner:
    """Greedy decoding of a batch of B prompts with one reduction order (and fault class): an eager
    prefill, then one step per token; the step is captured once as a CUDA graph and replayed (the fault
    plan, the position and the step are data in static buffers), or run eagerly: the same code either way."""

    def __init__(self, tpm: TPModel, order: str, fault_class: str | None, B: int, args: argparse.Namespace,
                 use_graph: bool):
        dev = DEVICE
        self.tpm, self.B, self.new, self.K = tpm, B, args.new_tokens, args.top_k
        self.sites = 2 * len(tpm.m.blocks)
        S = args.prompt_len + args.new_tokens
        self.red = Reducer(order, fault_class, tpm.tp, dev)
        dt = tpm.m.head.weight.dtype
        self.k = [torch.zeros(B, tpm.H, S, tpm.hd, dtype=dt, device=dev) for _ in tpm.m.blocks]
        self.v = [torch.zeros_like(t) for t in self.k]
        self.tok = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.stepi = torch.zeros(1, dtype=torch.long, device=dev)
        self.positions = torch.arange(S, device=dev)
        self.zero_bias = torch.zeros(S, device=dev)
        self.ids = torch.zeros(self.new, B, self.K, dtype=torch.uint8, device=dev)
        self.lp = torch.zeros(self.new, B, self.K, dtype=torch.float32, device=dev)
        shape = {"scale": (self.new, self.sites, tpm.tp), "crosstalk": (self.new, self.sites, tpm.tp),
                 "stale": (self.new, self.sites, B)}.get(fault_class)
        pdt = {"scale": dt, "crosstalk": torch.bool, "stale": torch.bool}.get(fault_class)
        self.plan = torch.zeros(shape, dtype=pdt, device=dev) if shape else None
        self.use_graph, self.graph, self.capture_s = use_graph, None, 0.0

    def _emit(self, logits: torch.Tensor, at: torch.Tensor | int) -> None:
        vals, ids = torch.log_softmax(logits.float(), dim=-1).topk(self.K, dim=-1)
        if isinstance(at, int):
            self.lp[at].copy_(vals)
            self.ids[at].copy_(ids.to(torch.uint8))
        else:
            self.lp.index_copy_(0, at, vals.unsqueeze(0))
            self.ids.index_copy_(0, at, ids.to(torch.uint8).unsqueeze(0))
        self.tok.copy_(ids[:, :1])  # greedy: the best of the top-k

    def _step(self) -> None:
        self.red.begin(None if self.plan is None else self.plan.index_select(0, self.stepi)[0])
        self._emit(self.tpm.step(self, self.red), self.stepi)
        self.pos.add_(1)
        self.stepi.add_(1)

    def _capture(self) -> None:
        t0 = time.monotonic()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up: lazy buffers and kernels' first-call set-up, not captured
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._step()
        torch.cuda.synchronize()
        self.graph, self.capture_s = g, time.monotonic() - t0

    @torch.no_grad()
    def decode(self, prompts: torch.Tensor, v: Variant, rng: np.random.Generator, seen: set) -> tuple:
        """Top-k ids [B, T, K] and log-probabilities, the reduction calls made and the fault hits."""
        if self.use_graph and self.graph is None:
            try:
                self._capture()
            except Exception as e:  # noqa: BLE001 - a step that cannot be captured still runs eagerly
                self.use_graph, self.graph = False, None
                say(f"    CUDA-graph capture failed at batch {self.B} ({type(e).__name__}: {e}): eager decoding")
        B, Tp = prompts.shape
        hits, prefill_row = 0, None
        if v.fault is not None:
            rows = B * Tp
            pre, h0 = fault_plan(v, rng, 1, self.sites, rows, self.tpm.tp, first=("rows", rows) not in seen)
            seen.add(("rows", rows))
            dec, h1 = fault_plan(v, rng, self.new - 1, self.sites, B, self.tpm.tp, first=("rows", B) not in seen)
            seen.add(("rows", B))
            hits = h0 + h1
            prefill_row = torch.from_numpy(pre[0]).to(DEVICE, self.plan.dtype)
            self.plan[1:].copy_(torch.from_numpy(dec).to(self.plan.dtype))
        self.red.begin(prefill_row)
        self._emit(self.tpm.forward(prompts, self.red, kv=self, last_only=True)[:, -1], 0)
        self.pos.fill_(Tp)
        self.stepi.fill_(1)
        for _ in range(self.new - 1):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        ids = self.ids.transpose(0, 1).cpu().numpy().copy()  # a copy: on the CPU .cpu() is the buffer itself
        lp = self.lp.transpose(0, 1).cpu().numpy().copy()
        return ids, lp, self.new * self.sites, hits


# ----- training and the held-out loss ---------------------------------------------------------------
def train(model: GPT, data: torch.Tensor, args: argparse.Namespace) -> tuple[int, float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator(device="cpu").manual_seed(0)
    t0, steps, loss = time.monotonic(), 0, float("nan")
    model.train()
    while time.monotonic() - t0 < args.train_s:
        lr = 1e-3 * min(1.0, (steps + 1) / 100)
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(0, len(data) - model.ctx - 1, (args.batch,), generator=gen)
        xb = torch.stack([data[i:i + model.ctx] for i in ix]).to(DEVICE)
        yb = torch.stack([data[i + 1:i + model.ctx + 1] for i in ix]).to(DEVICE)
        with torch.autocast(DEVICE.type, dtype=BF16):
            logits = model(xb)
        loss_t = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for m in model.moe_blocks():
            m.update_bias(args.bias_update)
        steps += 1
        if steps % 50 == 0:
            loss = loss_t.item()
    if math.isnan(loss):
        loss = loss_t.item()
    model.eval()
    return steps, loss


@torch.no_grad()
def held_out_loss(tpm: TPModel, held: torch.Tensor, v: Variant, seed: int, args: argparse.Namespace) -> float:
    """Teacher-forced loss over the start of the held-out text (--held-rows rows of ctx bytes), in batches of
    min(64, the variant's decode batch) rows, with the variant's reduction (its own fault draw)."""
    ctx, rows = tpm.m.ctx, min(64, v.batch)
    red = Reducer(v.order, v.fault_class, tpm.tp, DEVICE)
    rng, seen = np.random.default_rng(seed + 1), set()
    total, n = 0.0, 0
    starts = torch.arange(args.held_rows) * (ctx + 1)
    starts = starts[starts + ctx + 1 < len(held)]
    for a in range(0, len(starts), rows):
        ix = starts[a:a + rows]
        xb = torch.stack([held[i:i + ctx] for i in ix]).to(DEVICE)
        yb = torch.stack([held[i + 1:i + ctx + 1] for i in ix]).to(DEVICE)
        row = None
        if v.fault is not None:
            r = xb.numel()
            plan, _ = fault_plan(v, rng, 1, 2 * len(tpm.m.blocks), r, tpm.tp, first=r not in seen)
            seen.add(r)
            row = torch.from_numpy(plan[0]).to(DEVICE, BF16 if v.fault_class == "scale" else torch.bool)
        red.begin(row)
        logits = tpm.forward(xb, red)
        total += F.cross_entropy(logits.float().view(-1, 256), yb.view(-1), reduction="sum").item()
        n += yb.numel()
    return total / max(n, 1)


# ----- self-tests -----------------------------------------------------------------------------------
@torch.no_grad()
def self_test_reducers(tp: int) -> None:
    """The vectorised ring and tree add exactly as the chunk-by-chunk and list-by-list versions did (on the
    same device, bit for bit); the faults do what they say."""
    gen = torch.Generator().manual_seed(3)
    for rows, d in ((5, 8 * tp), (3, 16 * tp)):
        parts = [(torch.randn(rows, d, generator=gen) * 10.0 ** float(torch.randint(-2, 3, (1,), generator=gen)))
                 .to(BF16).to(DEVICE) for _ in range(tp)]
        P = torch.stack(parts)

        def same(a: torch.Tensor, b: torch.Tensor) -> bool:
            return torch.equal(a.view(torch.int16), b.view(torch.int16))
        assert same(Reducer("ring", None, tp, DEVICE).reduce(P), ring_reference(parts)), "ring differs"
        level = list(parts)
        while len(level) > 1:
            level = [(level[i] + level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        assert same(Reducer("tree", None, tp, DEVICE).reduce(P), level[0]), "tree differs"
        one = torch.stack([p.float() for p in parts]).sum(0).to(BF16)
        assert same(Reducer("oneshot", None, tp, DEVICE).reduce(P), one), "oneshot differs"
        r = Reducer("ring", "scale", tp, DEVICE)
        scale = torch.ones(1, tp, dtype=BF16, device=DEVICE)
        scale[0, 2] = 0.0
        r.begin(scale)
        assert same(r(P), ring_reference(parts[:2] + [torch.zeros_like(parts[2])] + parts[3:])), "drop differs"
        r = Reducer("ring", "crosstalk", tp, DEVICE)
        hit = torch.zeros(1, tp, dtype=torch.bool, device=DEVICE)
        hit[0, 3] = True
        r.begin(hit)
        assert same(r(P), ring_reference(parts[:3] + [parts[3].roll(-1, 0)] + parts[4:])), "crosstalk differs"
        r = Reducer("ring", "stale", tp, DEVICE)
        mask = torch.zeros(2, rows, dtype=torch.bool, device=DEVICE)
        mask[1, 1] = True
        r.begin(mask)
        first, second = r(P), r(P.flip(0))  # the second call: row 1 of rank 1 still holds the first call's
        rank1 = parts[-2].clone()
        rank1[1] = parts[1][1]
        assert same(first, ring_reference(parts)), "stale's first call differs"
        assert same(second, ring_reference(parts[::-1][:1] + [rank1] + parts[::-1][2:])), "stale differs"


@torch.no_grad()
def self_test_tp(model: GPT, args: argparse.Namespace, data: torch.Tensor) -> float:
    """In fp32: the TP partial sums added (one-shot) give the unsplit model's logits (the shards are right),
    and the KV-cache decode gives what recomputing the whole sequence for every token gives."""
    ref = copy.deepcopy(model).float().eval()
    tpm = TPModel(copy.deepcopy(model).float(), args.tp, torch.float32)
    xb = data[:2 * 32].view(2, 32).to(DEVICE)
    diff = (tpm.forward(xb, Reducer("oneshot", None, args.tp, DEVICE)) - ref(xb)).abs().max().item()
    assert diff < 1e-3, f"TP partial sums do not add up to the model: {diff}"
    prompts = data[:2 * args.prompt_len].view(2, -1).to(DEVICE)
    ids, lp, _, _ = Runner(tpm, "ring", None, 2, args, False).decode(prompts, Variant("ring", "ring", 2),
                                                                      np.random.default_rng(0), set())
    seq, red = prompts, Reducer("ring", None, args.tp, DEVICE)
    for t in range(args.new_tokens):  # recompute everything, feeding the decode's own choices
        red.begin(None)
        full = torch.log_softmax(tpm.forward(seq, red)[:, -1].float(), -1).cpu().numpy()
        chosen = ids[:, t, 0].astype(np.int64)
        err = max(np.abs(full[np.arange(2), chosen] - lp[:, t, 0]).max(), np.abs(full.max(-1) - lp[:, t, 0]).max())
        assert err < 1e-4, f"the KV-cache decode's log-probabilities differ from a full recompute at step {t}: {err}"
        seq = torch.cat([seq, torch.from_numpy(chosen).to(DEVICE)[:, None]], dim=1)
    return diff


@torch.no_grad()
def graph_check(tpm: TPModel, prompts: torch.Tensor, args: argparse.Namespace) -> tuple[bool, str]:
    """A decode step replayed from a CUDA graph gives what the same step run eagerly gives, with faults hit
    often; False (use eager decoding) if capture fails or they differ beyond rounding."""
    small = argparse.Namespace(**{**vars(args), "new_tokens": min(8, args.new_tokens)})
    msgs, ok = [], True
    for v in (Variant("ring", "ring", 8), Variant("drop", "ring", 8, "drop", 3),
              Variant("stale", "ring", 8, "stale", 4), Variant("crosstalk", "ring", 8, "crosstalk", 3)):
        out = []
        for use_graph in (False, True):
            try:
                r = Runner(tpm, v.order, v.fault_class, 8, small, use_graph)
                out.append(r.decode(prompts[:8].to(DEVICE), v, np.random.default_rng(5), set()))
            except Exception as e:  # noqa: BLE001 - any failure means: decode eagerly
                return False, f"decode failed ({v.name}, graphs {use_graph}): {type(e).__name__}: {e}"
            if use_graph and r.graph is None:
                return False, f"graph capture failed ({v.name})"
        (ie, le, _, he), (ig, lg, _, hg) = out
        if np.array_equal(ie, ig) and np.array_equal(le.view(np.int32), lg.view(np.int32)):
            msgs.append(f"{v.name} bitwise equal ({he} hits)")
            continue
        same = (ie[..., 0] == ig[..., 0]).cumprod(axis=1).astype(bool)  # common prefix of each prompt
        gap = float(np.abs(le[..., 0] - lg[..., 0])[same].max()) if same.any() else float("inf")
        msgs.append(f"{v.name} differs: max common-prefix change {gap:.4f}")
        ok = ok and gap < 0.05
    return ok, "; ".join(msgs)


# ----- one model: train, decode every variant of every seed, write -----------------------------------
def draw_prompts(held: torch.Tensor, seed: int, args: argparse.Namespace) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + seed)
    starts = torch.randint(0, len(held) - args.prompt_len, (args.prompts,), generator=gen)
    return torch.stack([held[i:i + args.prompt_len] for i in starts])


def runs_of(seeds: int, args: argparse.Namespace) -> int:
    return sum(len(variants(s, args)) for s in range(seeds))


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def arrays_of(raw: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    out = {}
    for key, (ids, lp) in raw.items():
        out[f"{key}.top_ids"], out[f"{key}.top_lp"] = ids, lp
    return out


class Plan:
    """The run's time budget: what each seed and each variant cost per layer on the models decoded so far,
    projected onto the seeds and models still to come."""

    def __init__(self, args: argparse.Namespace, layers: list[int]):
        self.args, self.layers = args, layers
        self.seed_cost: dict[int, float] = {}  # seconds per layer of a whole seed, as measured
        self.var_cost: dict[str, float] = {}  # seconds per layer of one variant's decode (no capture)

    def seed_s(self, s: int, layers: int, current: bool = False) -> float:
        """A seed's projected seconds: on the model being decoded, the sum of its variants' decode times
        (seed 0's, no graph capture); on a later one, the whole seed as measured on the last model."""
        if current or s not in self.seed_cost:
            return sum(self.var_cost.get(v.name, 0.0) for v in variants(s, self.args)) * layers
        return self.seed_cost[s] * layers

    def finish_s(self, runs: int) -> float:  # the gate's statistics (Python) and the compressed write
        return 5.0 + 0.5 * runs

    def fits(self, j: int, s: int, layers: int) -> tuple[bool, float]:
        """Whether seed s of the j-th model fits, with the models after it decoding seeds 0..s too."""
        need = time.monotonic() - T_START + self.seed_s(s, layers, True) + self.finish_s(runs_of(s + 1, self.args))
        for L in self.layers[j + 1:]:
            need += self.args.train_s + 15.0 + sum(self.seed_s(x, L) for x in range(s + 1))
            need += self.finish_s(runs_of(s + 1, self.args))
        return need <= self.args.budget_s, need


def run_model(j: int, layers: int, args: argparse.Namespace, data: torch.Tensor, held: torch.Tensor,
              plan: Plan, notes: list[str]) -> dict:
    name = f"{args.model}-{layers}"
    torch.manual_seed(0)
    model = GPT(layers, args).to(DEVICE)
    if args.smoke_cpu:
        say(f"  {name}: self-test: TP partial sums match the unsplit model (fp32 max diff "
            f"{self_test_tp(model, args, data):.1e})")
    torch.use_deterministic_algorithms(True, warn_only=True)
    steps, train_loss = train(model, data, args)
    torch.use_deterministic_algorithms(False)  # inference uses deterministic kernels only; ring-again checks it
    say(f"  {name}: trained {steps} steps in {args.train_s:.0f} s, train loss {train_loss:.3f} nats/byte "
        f"[{time.monotonic() - T_START:.0f} s]")
    tpm = TPModel(model, args.tp)
    use_graph = DEVICE.type == "cuda" and args.graphs == "on" and args.new_tokens >= 3  # warm-up takes 2 steps
    if use_graph and args.graph_ok is None:
        args.graph_ok, msg = graph_check(tpm, draw_prompts(held, 99, args), args)
        say(f"  CUDA-graph decode check: {msg} -> {'graphs' if args.graph_ok else 'EAGER decoding (slower)'}")
        if not args.graph_ok:
            notes.append(f"decode steps run eagerly: {msg}")
    use_graph = use_graph and bool(args.graph_ok)
    runners: dict[tuple, Runner] = {}
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    runs: dict[str, dict] = {}
    n_seeds = args.seeds
    with torch.no_grad():
        for s in range(args.seeds):
            vs = variants(s, args)
            if s >= n_seeds:
                break
            if s > 0:
                ok, need = plan.fits(j, s, layers)
                if not ok:
                    note = (f"{name}: budget: dropping seeds {s}..{args.seeds - 1} (seed {s} would end the run at "
                            f"{need:.0f} s projected, --budget-s {args.budget_s:.0f})")
                    say("  " + note)
                    notes.append(note)
                    break
            t_seed = time.monotonic()
            prompts = draw_prompts(held, s, args)
            for v in vs:
                key = f"{v.name}.s{s}"
                fseed = zlib.crc32(key.encode())
                t0, capture = time.monotonic(), 0.0
                rng, seen = np.random.default_rng(fseed), set()
                ids_l, lp_l, calls, hits = [], [], 0, 0
                for a in range(0, len(prompts), v.batch):
                    chunk = prompts[a:a + v.batch]
                    rk = (v.order, v.fault_class, len(chunk))
                    if rk not in runners:
                        runners[rk] = Runner(tpm, v.order, v.fault_class, len(chunk), args, use_graph)
                    r = runners[rk]
                    c0 = r.capture_s
                    ids, lp, c, h = r.decode(chunk.to(DEVICE), v, rng, seen)
                    capture += r.capture_s - c0
                    ids_l.append(ids)
                    lp_l.append(lp)
                    calls, hits = calls + c, hits + h
                dt = time.monotonic() - t0
                raw[key] = (np.ascontiguousarray(np.concatenate(ids_l)), np.ascontiguousarray(np.concatenate(lp_l)))
                loss = held_out_loss(tpm, held, v, fseed, args) if s == 0 else None
                plan.var_cost[v.name] = (dt - capture) / layers
                fault = None if v.fault is None else {
                    "kind": v.fault, "rate": v.rate, "unit": FAULT_UNIT[v.fault], "hits": hits, "seed": fseed,
                    **({"rank": 1} if v.fault == "stale" else {}), **({"row_shift": 1} if v.fault == "crosstalk" else {})}
                runs[key] = {"variant": v.name, "seed": s, "correct": v.correct, "batch": v.batch, "fault": fault,
                             "reductions": calls, "held_out_loss": loss, "decode_s": round(dt, 3),
                             "capture_s": round(capture, 3), "scan": v.scan}
                say(f"  {name}: {key:16s} batch {v.batch:4d} decoded in {dt:6.2f} s"
                    + (f" (graph capture {capture:.2f} s)" if capture else "")
                    + f", {calls} reductions" + (f", {hits} {FAULT_UNIT[v.fault]}s hit" if v.fault else "")
                    + (f", held-out loss {loss:.4f}" if loss is not None else "")
                    + f" [{time.monotonic() - T_START:.0f} s]")
            plan.seed_cost[s] = (time.monotonic() - t_seed) / layers
            if s == 0:  # how many seeds the .npz holds: measured on seed 0's runs
                per_run = len(npz_bytes(arrays_of(raw))) / len(raw)
                limit = args.max_npz_mib * 2 ** 20 * 0.97
                fit = max([n for n in range(1, args.seeds + 1) if per_run * runs_of(n, args) <= limit], default=1)
                if fit < args.seeds:
                    note = (f"{name}: {name}.npz holds {fit} of {args.seeds} seeds under {args.max_npz_mib} MiB "
                            f"({per_run / 2 ** 10:.0f} KiB a run, {runs_of(args.seeds, args)} runs for all): "
                            f"decoding seeds 0..{fit - 1} only")
                    say("  " + note)
                    notes.append(note)
                n_seeds = fit
    del runners
    # the file, under the size limit, dropping the last seeds if the projection was short
    kept = max(r["seed"] for r in runs.values()) + 1
    while True:
        keys = [k for k, r in runs.items() if r["seed"] < kept]
        blob = npz_bytes(arrays_of({k: raw[k] for k in keys}))
        if len(blob) <= args.max_npz_mib * 2 ** 20 or kept == 1:
            break
        kept -= 1
        note = f"{name}: {name}.npz over {args.max_npz_mib} MiB: seed {kept} dropped"
        say("  " + note)
        notes.append(note)
    while len(blob) > args.max_npz_mib * 2 ** 20 and len(keys) > 1:  # seed 0 alone too big: its last runs go
        note = f"{name}: {name}.npz over {args.max_npz_mib} MiB with seed 0 alone: run {keys.pop()} dropped"
        say("  " + note)
        notes.append(note)
        blob = npz_bytes(arrays_of({k: raw[k] for k in keys}))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.npz").write_bytes(blob)
    runs = {k: runs[k] for k in keys}
    # the gate's statistics of every run against the ring of its seed
    stats = {}
    rows_of = {}
    for key in keys:
        rows_of[key] = to_rows(*raw[key])
    for key in keys:
        ref = rows_of[f"ring.s{runs[key]['seed']}"]
        stats[key] = gate.compare(ref, rows_of[key], args.top_k).as_dict()
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in ("graph_ok", "sub_batch_list")}
    ring0 = runs.get("ring.s0", {}).get("held_out_loss")
    meta = {"model": args.model, "layers": layers, "settings": settings, "train_steps": steps,
            "train_loss": train_loss, "held_out_loss_ring": ring0, "device": device_name(),
            "torch": torch.__version__, "graphs": use_graph, "notes": list(notes),
            "runs": runs}
    (args.out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    say(f"  {name}: wrote {name}.npz ({len(blob) / 2 ** 20:.2f} MiB, {len(keys)} runs) and {name}.json "
        f"[{time.monotonic() - T_START:.0f} s]")
    return {"name": name, "layers": layers, "reductions_per_token": 2 * layers, "train_steps": steps,
            "train_loss": train_loss, "held_out_loss_ring": ring0, "runs": runs, "stats": stats}


def to_rows(ids: np.ndarray, lp: np.ndarray) -> dict[str, list[gate.TokenLogprob]]:
    il, ll = ids.tolist(), lp.tolist()
    return {str(p): [gate.TokenLogprob(t[0], x[0], dict(zip(t, x, strict=True))) for t, x in zip(il[p], ll[p], strict=True)]
            for p in range(len(il))}


def device_name() -> str:
    return torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu (smoke run: no figures)"


def derive(models: dict) -> dict:
    """Thresholds between what correct variants reach and what broken reductions (at their default rates)
    reach, geometric means, with the margin on each side."""
    out = {}
    for key in ("max_delta", "p99_delta", "max_flip_gap"):
        ok = [v[key] or 0.0 for m in models.values() for k, v in m["variants"].items()
              if v["correct"] and not k.startswith("ring-again.")]
        bad = [v[key] or 0.0 for m in models.values() for v in m["variants"].values() if not v["correct"] and not v["scan"]]
        hi_ok, lo_bad = max(ok, default=0.0), min(bad, default=0.0)
        thr = math.sqrt(hi_ok * lo_bad) if hi_ok > 0 and lo_bad > hi_ok else None
        out[key] = {"correct_max": hi_ok, "broken_min": lo_bad, "threshold_geomean": thr,
                    "margin_over_correct": thr / hi_ok if thr else None, "margin_under_broken": lo_bad / thr if thr else None}
    return out


def summary(models: list[dict], thresholds: gate.Thresholds) -> list[str]:
    def f(x, w=7, d=3):
        return f"{x:{w}.{d}f}" if isinstance(x, float) else f"{'-':>{w}s}"
    lines = [f"{'model':9s} {'run':16s} {'ok?':4s} {'batch':>5s} {'exact':>6s} {'1st div':>7s} {'tokens':>7s} "
             f"{'p50':>7s} {'p99':>7s} {'max':>7s} {'flips':>5s} {'hard':>4s} {'maxgap':>7s} {'loss':>7s}  "
             f"verdict(defaults), against ring.s<seed>"]
    for m in models:
        for key, r in m["runs"].items():
            v = m["stats"][key]
            st = gate.GateStats(**{k: v[k] for k in gate.GateStats.__dataclass_fields__})
            verdict = "(reference)" if key == f"ring.s{r['seed']}" else gate.verdict(st, thresholds)[0]
            lines.append(f"{m['name']:9s} {key:16s} {'yes' if r['correct'] else 'no':4s} {r['batch']:5d} "
                         f"{f(v['exact_match_rate'], 6, 2)} {f(v['median_first_divergence'], 7, 1)} {v['tokens']:7d} "
                         f"{f(v['p50_delta'])} {f(v['p99_delta'])} {f(v['max_delta'])} {v['flips']:5d} "
                         f"{v['hard_mismatches']:4d} {f(v['max_flip_gap'])} {f(r['held_out_loss'], 7, 4)}  {verdict}")
    return lines


class Tee:
    """Everything printed, to the terminal and to --out/log.txt."""

    def __init__(self, *streams):
        self.streams = streams

    def __getattr__(self, name):
        return getattr(self.streams[0], name)

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", choices=("dense", "moe"), default="dense")
    p.add_argument("--layers", default="8,24", help="comma-separated model depths (two reductions per layer)")
    for flag, default in SIZES.items():  # the run's sizes: TP ways, model, training, decoding, budget
        p.add_argument(f"--{flag}", type=type(default), default=default)
    p.add_argument("--fault-scan", action="store_true", help="seed 0 also decodes drop@1000, drop@5000, stale@512")
    p.add_argument("--graphs", choices=("on", "off"), default="on", help="decode steps as CUDA graphs")
    p.add_argument("--smoke-cpu", action="store_true", help="a tiny run on the CPU, to check the script itself")
    if "--smoke-cpu" in sys.argv[1:]:
        p.set_defaults(**SMOKE)
    args = p.parse_args()
    args.sub_batch_list = [int(x) for x in args.sub_batches.split(",") if x]
    args.graph_ok = None
    global DEVICE
    if args.smoke_cpu:
        DEVICE = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("error: no CUDA device: this script runs on a GPU machine (tools/gpu/)", file=sys.stderr)
        return 1
    for what, n, k in (("--d-model", args.d_model, args.tp), ("--expert-inter", args.expert_inter, args.tp),
                       ("--shared-inter", args.shared_inter, args.tp), ("--d-model", args.d_model, args.heads)):
        if n % k:
            print(f"error: {what} {n} is not a multiple of {k}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "log.txt").open("w")
    sys.stdout = Tee(sys.__stdout__, log)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    self_test_reducers(args.tp)
    raw = torch.frombuffer(bytearray(corpus(args.corpus_bytes)), dtype=torch.uint8).long()
    split = int(len(raw) * 0.95)
    data, held = raw[:split], raw[split:]
    say(f"corpus: {len(raw)} bytes of this repository's text; model {args.model}; TP {args.tp}; {device_name()}; "
        f"torch {torch.__version__}; reducers self-tested [{time.monotonic() - T_START:.0f} s]")
    layer_list = [int(x) for x in args.layers.split(",")]
    plan, notes, models = Plan(args, layer_list), [], []
    for j, layers in enumerate(layer_list):
        models.append(run_model(j, layers, args, data, held, plan, notes))
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
    thresholds = gate.thresholds()  # the kit's defaults (launcher/settings.py KIT_GATE_*), or as set
    lines = summary(models, thresholds)
    (args.out / "summary.txt").write_text("\n".join(lines + [""] + notes) + "\n")
    cal = {m["name"]: {"layers": m["layers"], "reductions_per_token": m["reductions_per_token"],
                       "train_steps": m["train_steps"], "train_loss": m["train_loss"],
                       "held_out_loss_ring": m["held_out_loss_ring"],
                       "variants": {k: {"correct": r["correct"], "scan": r["scan"], "loss": r["held_out_loss"],
                                        **m["stats"][k]}
                                    for k, r in m["runs"].items() if k != f"ring.s{r['seed']}"}}
           for m in models}
    result = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                           if k != "sub_batch_list"},
              "device": device_name(), "torch": torch.__version__, "models": cal, "derived": derive(cal), "notes": notes}
    (args.out / "calibration.json").write_text(json.dumps(result, indent=2) + "\n")
    for line in lines:
        say(line)
    say(json.dumps(result["derived"], indent=2))
    for n in notes:
        say("note: " + n)
    say(f"done in {time.monotonic() - T_START:.0f} s: " + ", ".join(sorted(x.name for x in args.out.iterdir())))
    sys.stdout = sys.__stdout__
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
