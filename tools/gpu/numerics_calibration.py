"""Calibrate the log-probability correctness gate (bench/run/logprob_gate.py) on one GPU.

What it reproduces: tensor parallelism splits each row-parallel layer (attention output, MLP down) into TP
partial sums, one per GPU, that an all-reduce adds. Correct all-reduces add them in different orders
(a ring, a tree, a one-shot kernel that sums in fp32 and rounds once), and bf16 rounding then differs in the
last bits; broken ones drop a partial, read a stale one, or add one twice. This script trains a small
byte-level GPT for a fixed time, decodes prompts greedily with each reduction, and prints the gate's
statistics of each against the ring (NCCL's default) with the exact code the bench gates with.

No NCCL and no second GPU: the TP ranks' partial sums are computed on the one GPU, shard by shard, each
rounded to bf16 as a GPU's output would be, and reduced in software in the order named.

    python3 tools/gpu/numerics_calibration.py --out "$OUT"          # about 4 minutes on one H200

Writes calibration.json (every statistic of every variant, the derived thresholds) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS: one order, one result

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.run import logprob_gate as gate  # noqa: E402  (standard library only)

DEVICE = torch.device("cuda")
SIZES = {"tp": 8, "d-model": 512, "heads": 8, "ctx": 256, "batch": 64, "train-s": 60.0, "prompts": 128,
         "prompt-len": 64, "new-tokens": 192, "top-k": 5, "corpus-bytes": 48_000_000}
CORRECT = ("ring", "tree", "oneshot")  # ring is the reference
BROKEN = ("drop", "stale", "double")


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


# ----- the model ------------------------------------------------------------------------------------
class Reducer:
    """Adds TP partial sums (a list of bf16 tensors) in one named order; counts calls for the faults."""

    def __init__(self, kind: str, tp: int, seed: int = 0):
        self.kind, self.tp, self.calls = kind, tp, 0
        self.gen = torch.Generator().manual_seed(seed)
        self.prev: dict[tuple, torch.Tensor] = {}

    def __call__(self, parts: list[torch.Tensor]) -> torch.Tensor:
        self.calls += 1
        kind = self.kind
        if kind in ("drop", "double") and torch.randint(0, 200, (1,), generator=self.gen).item() == 0:
            r = int(torch.randint(0, self.tp, (1,), generator=self.gen).item())
            hit = torch.zeros_like(parts[r]) if kind == "drop" else parts[r] + parts[r]  # lost, or added twice
            parts = parts[:r] + [hit] + parts[r + 1:]
        if kind == "stale":  # rank 1's buffer: 1 row in 64 still holds the previous call's values
            r, cur = 1, parts[1]
            key = tuple(cur.shape)
            old = self.prev.get(key)
            self.prev[key] = cur
            if old is not None:
                rows = cur.reshape(-1, cur.shape[-1]).clone()
                stale_rows = torch.arange(self.calls % min(64, rows.shape[0]), rows.shape[0], 64, device=rows.device)
                rows[stale_rows] = old.reshape(-1, cur.shape[-1])[stale_rows]
                parts = parts[:r] + [rows.reshape(cur.shape)] + parts[r + 1:]
        if kind == "oneshot":
            return torch.stack([p.float() for p in parts]).sum(0).to(torch.bfloat16)
        if kind == "tree":
            level = list(parts)
            while len(level) > 1:
                level = [(level[i] + level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
            return level[0]
        # ring (and the faults, which corrupt a ring): reduce-scatter, chunk c accumulated from rank c+1 on,
        # each hop's sum rounded to bf16, then all-gathered
        n = len(parts)
        chunks = [p.chunk(n, dim=-1) for p in parts]
        out = []
        for c in range(n):
            acc = chunks[(c + 1) % n][c]
            for i in range(2, n + 1):
                acc = acc + chunks[(c + i) % n][c]
            out.append(acc)
        return torch.cat(out, dim=-1)


class GPT(torch.nn.Module):
    def __init__(self, layers: int, d: int, heads: int, ctx: int, vocab: int = 256):
        super().__init__()
        self.d, self.heads, self.ctx = d, heads, ctx
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            b.qkv = torch.nn.Linear(d, 3 * d, bias=False)
            b.proj = torch.nn.Linear(d, d, bias=False)  # row-parallel
            b.up = torch.nn.Linear(d, 4 * d, bias=False)
            b.down = torch.nn.Linear(4 * d, d, bias=False)  # row-parallel
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def row_parallel(self, lin: torch.nn.Linear, x: torch.Tensor, reduce: Reducer | None) -> torch.Tensor:
        if reduce is None:
            return lin(x)
        tp = reduce.tp
        xs, ws = x.chunk(tp, dim=-1), lin.weight.chunk(tp, dim=1)
        return reduce([xi @ wi.t() for xi, wi in zip(xs, ws, strict=True)])

    def forward(self, idx: torch.Tensor, reduce: Reducer | None = None, cache: list | None = None,
                start: int = 0) -> torch.Tensor:
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(start, start + T, device=idx.device))
        hd = self.d // self.heads
        for li, b in enumerate(self.blocks):
            q, k, v = b.qkv(b.ln1(x)).split(self.d, dim=-1)
            q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
            if cache is not None:
                if start > 0:
                    pk, pv = cache[li]
                    k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
                cache[li] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=(T > 1))
            x = x + self.row_parallel(b.proj, a.transpose(1, 2).reshape(B, T, self.d), reduce)
            x = x + self.row_parallel(b.down, F.gelu(b.up(b.ln2(x))), reduce)
        return self.head(self.lnf(x))


def train(model: GPT, data: torch.Tensor, seconds: float, batch: int) -> tuple[int, float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator(device="cpu").manual_seed(0)
    t0, steps, loss = time.monotonic(), 0, float("nan")
    model.train()
    while time.monotonic() - t0 < seconds:
        lr = 1e-3 * min(1.0, (steps + 1) / 100)
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(0, len(data) - model.ctx - 1, (batch,), generator=gen)
        xb = torch.stack([data[i:i + model.ctx] for i in ix]).to(DEVICE)
        yb = torch.stack([data[i + 1:i + model.ctx + 1] for i in ix]).to(DEVICE)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            logits = model(xb)
        loss_t = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
        if steps % 50 == 0:
            loss = loss_t.item()
    return steps, loss


@torch.no_grad()
def held_out_loss(model: GPT, data: torch.Tensor, reduce: Reducer, batches: int = 8) -> float:
    total, n = 0.0, 0
    for b in range(batches):
        ix = torch.arange(b * 64, (b + 1) * 64) * (model.ctx + 1)
        ix = ix[ix + model.ctx + 1 < len(data)]
        if len(ix) == 0:
            break
        xb = torch.stack([data[i:i + model.ctx] for i in ix]).to(DEVICE)
        yb = torch.stack([data[i + 1:i + model.ctx + 1] for i in ix]).to(DEVICE)
        logits = model(xb, reduce)
        total += F.cross_entropy(logits.float().view(-1, 256), yb.view(-1), reduction="sum").item()
        n += yb.numel()
    return total / n


@torch.no_grad()
def decode(model: GPT, prompts: torch.Tensor, new: int, reduce: Reducer, top_k: int) -> list[list[gate.TokenLogprob]]:
    """Greedy decode with a KV cache: every position's chosen token, its log-probability (fp32 log-softmax of
    the logits, as SGLang computes it) and the top-k alternatives."""
    cache: list = [None] * len(model.blocks)
    logits = model(prompts, reduce, cache, 0)[:, -1]
    pos = prompts.shape[1]
    out: list[list[gate.TokenLogprob]] = [[] for _ in range(prompts.shape[0])]
    for _ in range(new):
        lp = torch.log_softmax(logits.float(), dim=-1)
        tok = lp.argmax(-1)
        vals, ids = lp.topk(top_k, dim=-1)
        chosen = lp.gather(1, tok[:, None])[:, 0]
        for b, (t, c, v, i) in enumerate(zip(tok.tolist(), chosen.tolist(), vals.tolist(), ids.tolist(), strict=True)):
            out[b].append(gate.TokenLogprob(t, c, dict(zip(i, v, strict=True))))
        logits = model(tok[:, None], reduce, cache, pos)[:, -1]
        pos += 1
    return out


def run_model(name: str, layers: int, args: argparse.Namespace, data: torch.Tensor, held: torch.Tensor) -> dict:
    torch.manual_seed(0)
    model = GPT(layers, args.d_model, args.heads, args.ctx).to(DEVICE)
    steps, train_loss = train(model, data, args.train_s, args.batch)
    print(f"  {name}: trained {steps} steps in {args.train_s:.0f} s, train loss {train_loss:.3f} nats/byte", flush=True)
    model = model.to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, len(held) - args.prompt_len, (args.prompts,), generator=gen)
    prompts = torch.stack([held[i:i + args.prompt_len] for i in starts]).to(DEVICE)
    runs, losses = {}, {}
    for kind in CORRECT + BROKEN + ("ring-again",):
        red = Reducer("ring" if kind == "ring-again" else kind, args.tp, seed=7)
        t0 = time.monotonic()
        rows = decode(model, prompts, args.new_tokens, red, args.top_k)
        runs[kind] = {str(i): r for i, r in enumerate(rows)}
        losses[kind] = held_out_loss(model, held, Reducer("ring" if kind == "ring-again" else kind, args.tp, seed=7))
        print(f"  {name}: {kind:10s} decoded in {time.monotonic() - t0:5.1f} s, {red.calls} reductions", flush=True)
    ref = runs["ring"]
    variants = {}
    for kind in ("ring-again", *CORRECT[1:], *BROKEN):
        st = gate.compare(ref, runs[kind], args.top_k)
        variants[kind] = {"correct": kind not in BROKEN, "loss": losses[kind], **st.as_dict()}
    return {"layers": layers, "reductions_per_token": 2 * layers, "train_steps": steps, "train_loss": train_loss,
            "held_out_loss_ring": losses["ring"], "variants": variants}


def device_name() -> str:
    return torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu (smoke run: no figures)"


def derive(models: dict) -> dict:
    """Thresholds between what correct reorderings reach and what broken reductions reach, geometric means,
    with the margin on each side."""
    out = {}
    for key in ("max_delta", "p99_delta", "max_flip_gap"):
        ok = [v[key] or 0.0 for m in models.values() for k, v in m["variants"].items() if v["correct"] and k != "ring-again"]
        bad = [v[key] or 0.0 for m in models.values() for v in m["variants"].values() if not v["correct"]]
        hi_ok, lo_bad = max(ok), min(bad)
        thr = math.sqrt(hi_ok * lo_bad) if hi_ok > 0 and lo_bad > hi_ok else None
        out[key] = {"correct_max": hi_ok, "broken_min": lo_bad, "threshold_geomean": thr,
                    "margin_over_correct": thr / hi_ok if thr else None, "margin_under_broken": lo_bad / thr if thr else None}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--layers", default="8,24", help="comma-separated model depths (two reductions per layer)")
    for flag, default in SIZES.items():  # the run's sizes: TP ways, model, training, decoding
        p.add_argument(f"--{flag}", type=type(default), default=default)
    p.add_argument("--smoke-cpu", action="store_true", help="a tiny run on the CPU, to check the script itself")
    args = p.parse_args()
    global DEVICE
    if args.smoke_cpu:
        DEVICE = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("error: no CUDA device: this script runs on a GPU machine (tools/gpu/)", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    raw = torch.frombuffer(bytearray(corpus(args.corpus_bytes)), dtype=torch.uint8).long()
    split = int(len(raw) * 0.95)
    data, held = raw[:split], raw[split:]
    print(f"corpus: {len(raw)} bytes of this repository's text; TP {args.tp}; {device_name()}; "
          f"torch {torch.__version__}", flush=True)
    models = {}
    for layers in (int(x) for x in args.layers.split(",")):
        name = f"{layers}-layer"
        models[name] = run_model(name, layers, args, data, held)
    result = {"settings": vars(args) | {"out": str(args.out)}, "device": device_name(),
              "torch": torch.__version__, "models": models, "derived": derive(models)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(result, indent=2) + "\n")
    thresholds = gate.thresholds()  # the kit's defaults (launcher/settings.py KIT_GATE_*), or as set
    hdr = (f"{'model':9s} {'variant':10s} {'ok?':5s} {'exact':>6s} {'1st div':>7s} {'tokens':>7s} {'p50':>7s} "
           f"{'p99':>7s} {'max':>7s} {'flips':>5s} {'hard':>4s} {'maxgap':>7s} {'loss':>7s}  verdict(defaults)")
    print(hdr)
    for name, m in models.items():
        for kind, v in m["variants"].items():
            st = gate.GateStats(**{k: v[k] for k in gate.GateStats.__dataclass_fields__})
            verdict, _ = gate.verdict(st, thresholds)

            def f(x, w=7, d=3):
                return f"{x:{w}.{d}f}" if isinstance(x, float) else f"{'-':>{w}s}"
            print(f"{name:9s} {kind:10s} {'yes' if v['correct'] else 'no':5s} {f(v['exact_match_rate'], 6, 2)} "
                  f"{f(v['median_first_divergence'], 7, 1)} {v['tokens']:7d} {f(v['p50_delta'])} {f(v['p99_delta'])} "
                  f"{f(v['max_delta'])} {v['flips']:5d} {v['hard_mismatches']:4d} {f(v['max_flip_gap'])} "
                  f"{f(v['loss'], 7, 4)}  {verdict}")
    print(json.dumps(result["derived"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
