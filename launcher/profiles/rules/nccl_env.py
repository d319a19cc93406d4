"""NCCL variables: algorithm and protocol choices that crash or corrupt on these hosts, and names NCCL ignores."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from launcher.profiles.nccl_names import KNOWN_NCCL_ENV
from launcher.profiles.rules.context import Context, Finding


def _sections(value: str) -> list[tuple[bool, set[str]]]:
    """NCCL_ALGO/NCCL_PROTO: `a,b`, `^a`, or per collective `a;allreduce:b,c;broadcast:^d` (NCCL parseList).

    Returns (exclude, lower-case tokens) for each `;`-separated section, the collective prefix dropped.
    """
    out = []
    for section in value.split(";"):
        items = section.split(":", 1)[-1].strip()
        if items:
            exclude = items.startswith("^")
            out.append((exclude, {t.strip().lower() for t in items.lstrip("^").split(",") if t.strip()}))
    return out


def _allows(value: str, proto: str) -> bool:
    """True when some collective may use `proto` (lower case) under this NCCL_PROTO value."""
    return any((proto not in toks) if exclude else (proto in toks) for exclude, toks in _sections(value))


def _algo_has_tree(value: str) -> bool:
    """True when some collective is told to use Tree (an exclusion list never selects it by name)."""
    return any(not exclude and "tree" in toks for exclude, toks in _sections(value))


def tree_with_cuda_graphs(ctx: Context) -> Iterator[Finding]:
    """(a) Tree crashed at CUDA-graph capture on the target host."""
    algo = ctx.env.get("NCCL_ALGO")
    if algo and _algo_has_tree(algo) and ctx.cuda_graphs_on():
        yield ctx.finding(
            "error",
            "tree_with_cuda_graphs",
            "env.NCCL_ALGO",
            f"NCCL_ALGO={algo} selects Tree while CUDA graphs are on; Tree crashed at graph capture on "
            "8x PCIe hosts. Use NCCL_ALGO=Ring (or remove it)",
        )


def ll128_on_pcie(ctx: Context) -> Iterator[Finding]:
    """(b) LL128 relies on 128-byte store ordering that PCIe does not guarantee: silent corruption."""
    proto = ctx.env.get("NCCL_PROTO")
    if not proto:
        return
    if not _allows(proto, "ll128"):
        return
    pcie = ctx.is_pcie()
    msg = (
        f"NCCL_PROTO={proto} allows LL128, which can corrupt data silently over PCIe "
        "(nccl#786); use NCCL_PROTO=LL or LL,Simple"
    )
    if pcie:
        yield ctx.finding("error", "ll128_on_pcie", "env.NCCL_PROTO", msg)
    elif pcie is None:
        yield ctx.finding("requires", "ll128_on_pcie", "env.NCCL_PROTO", "an NVLink host (NCCL_PROTO allows LL128)")


def nccl_proto_without_simple(ctx: Context) -> Iterator[Finding]:
    """LL/LL128 alone also carry prefill; NCCL_BUFFSIZE sizes only Simple's buffers (init.cc)."""
    proto = ctx.env.get("NCCL_PROTO")
    if not proto or _allows(str(proto), "simple"):
        return
    yield ctx.finding(
        "warning",
        "nccl_proto_without_simple",
        "env.NCCL_PROTO",
        f"NCCL_PROTO={proto} keeps Simple off for prefill all-reduces too, where LL moves half its bytes "
        "as flags (at most half the bus bandwidth): expect a longer TTFT; compare TTFT with `make bench`, "
        "or add Simple (NCCL_PROTO=LL,Simple) to let NCCL pick it for large messages",
    )
    if "NCCL_BUFFSIZE" in ctx.env:
        yield ctx.finding(
            "warning",
            "nccl_proto_without_simple",
            "env.NCCL_BUFFSIZE",
            f"NCCL_BUFFSIZE sizes only the Simple protocol's buffers, which NCCL_PROTO={proto} never uses, so it "
            "does nothing; remove it (NCCL_LL_BUFFSIZE sizes LL's)",
        )


def unknown_nccl_env(ctx: Context) -> Iterator[Finding]:
    """(i) NCCL silently ignores misspelt variables."""
    for name in ctx.env:
        if name.startswith("NCCL_") and name not in KNOWN_NCCL_ENV:
            close = difflib.get_close_matches(name, KNOWN_NCCL_ENV, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else "; NCCL ignores unknown variables"
            yield ctx.finding("warning", "unknown_nccl_env", f"env.{name}", f"unknown NCCL variable {name}{hint}")
