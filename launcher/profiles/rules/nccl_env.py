"""NCCL variables: algorithm and protocol choices that crash or corrupt on these hosts, and names NCCL ignores."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from launcher.profiles.nccl_names import KNOWN_NCCL_ENV, NCCL_DOCUMENTED_REMOVED
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
        "or add Simple (NCCL_PROTO=LL,Simple, the nccl-tuned-simple profile) to let NCCL pick it for large messages",
    )
    if "NCCL_BUFFSIZE" in ctx.env:
        yield ctx.finding(
            "warning",
            "nccl_proto_without_simple",
            "env.NCCL_BUFFSIZE",
            f"NCCL_BUFFSIZE sizes only the Simple protocol's buffers, which NCCL_PROTO={proto} never uses, so it "
            "does nothing; remove it (NCCL_LL_BUFFSIZE sizes LL's)",
        )


def _edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


TYPO_DISTANCE = 2  # edits between an unknown name and a known one that make it a typo


def _nearest(name: str) -> tuple[str, int] | None:
    best = min(KNOWN_NCCL_ENV, key=lambda known: (_edit_distance(name, known), known))
    distance = _edit_distance(name, best)
    return (best, distance) if distance <= TYPO_DISTANCE else None


def unknown_nccl_env(ctx: Context) -> Iterator[Finding]:
    """(i) NCCL silently ignores misspelt variables: a name within two edits of a known one is refused."""
    for name in ctx.env:
        if not name.startswith("NCCL_"):
            continue
        key = f"env.{name}"
        if name in NCCL_DOCUMENTED_REMOVED:
            yield ctx.finding(
                "warning", "unknown_nccl_env", key,
                f"{name} is documented in NCCL's user guide but no longer read by NCCL 2.28-2.31 (not in its "
                "src/); it does nothing: remove it",
            )
            continue
        if name in KNOWN_NCCL_ENV:
            continue
        near = _nearest(name)
        if near is not None:
            yield ctx.finding(
                "error", "unknown_nccl_env", key,
                f"unknown NCCL variable {name}; did you mean {near[0]}? NCCL ignores unknown names without a word, "
                f"so this setting would do nothing; rename it to {near[0]}",
            )
        else:
            close = difflib.get_close_matches(name, KNOWN_NCCL_ENV, n=1, cutoff=0.6)
            hint = f" (closest known: {close[0]})" if close else ""
            yield ctx.finding(
                "warning", "unknown_nccl_env", key,
                f"unknown NCCL variable {name}{hint}: not read by NCCL 2.28-2.31, which ignores unknown variables; "
                "remove it unless a newer NCCL reads it (launcher/profiles/nccl_names.py)",
            )


_P2P_LEVELS = {"LOC": 0, "NVL": 1, "NVB": 2, "C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8, "SYS": 9}
"""NCCL's PATH_* values and names (src/graph/topo.h:62-89, topoPathTypeStr; v2.28.9-1)."""
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")  # paths.cc levelsOldToNew: numbers 0-5, above 5 is SYS


def _p2p_level(value: str) -> int | None:
    """NCCL_P2P_LEVEL as ncclGetLevel reads it (src/graph/paths.cc:217-250): an exact name, else an old number."""
    v = value.strip()
    if v in _P2P_LEVELS:
        return _P2P_LEVELS[v]
    digits = re.match(r"\d+", v)
    if digits:
        return _P2P_LEVELS[_OLD_LEVELS[min(int(digits.group()), len(_OLD_LEVELS) - 1)]]
    return None


def _cross_socket_pairs(ctx: Context) -> list[tuple[int, int]]:
    nodes = ctx.facts.numa_nodes if ctx.facts else []
    pairs = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            pairs.extend((x, y) for x in a for y in b)
    return pairs


def p2p_level_across_sockets(ctx: Context) -> Iterator[Finding]:
    """NCCL_P2P_LEVEL=SYS overrides NCCL's own PXB default (paths.cc:318-327) and turns on P2P over the
    CPU socket link, where the doctor reports the GPU pairs as SYS (`pcie-cross-socket`)."""
    raw = ctx.env.get("NCCL_P2P_LEVEL")
    level = _p2p_level(str(raw)) if raw is not None else None
    if level is None or level < _P2P_LEVELS["SYS"]:
        return
    key = "env.NCCL_P2P_LEVEL"
    interconnect = ctx.facts.interconnect if ctx.facts else None
    if interconnect == "pcie-cross-socket":
        pairs = _cross_socket_pairs(ctx)
        where = (f"GPU{pairs[0][0]} and GPU{pairs[0][1]} (and {len(pairs) - 1} more pairs)" if pairs
                 else "some GPU pairs")
        yield ctx.finding(
            "warning", "p2p_level_across_sockets", key,
            f"NCCL_P2P_LEVEL={raw} turns on GPU peer-to-peer across the CPU socket link, between {where} on this "
            "host (SYS in `nvidia-smi topo -m`); NCCL's own default stops at PXB (src/graph/paths.cc:318-327) "
            "and routes those pairs through host memory, and P2P over the socket link is where hangs and slow "
            "paths are reported; set KIT_NCCL_P2P_LEVEL=PHB (peer-to-peer within a socket only) unless "
            "`make allreduce` on this host shows SYS faster and correct",
        )
    elif interconnect is None and ctx.is_pcie() is not False:
        yield ctx.finding(
            "requires", "p2p_level_across_sockets", key,
            f"GPUs behind one CPU socket, or P2P across the socket link proven on this host (NCCL_P2P_LEVEL={raw} "
            "enables it where NCCL's default PXB would not); `launcher doctor` reports pcie-cross-socket hosts",
        )


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def graph_mixing_off_with_eager_nccl(ctx: Context) -> Iterator[Finding]:
    """NCCL_GRAPH_MIXING_SUPPORT=0 does not support an eager collective on a communicator whose graph launch
    is outstanding (NCCL env.rst); these SGLang modes run pynccl, the captured communicator, eagerly."""
    if str(ctx.env.get("NCCL_GRAPH_MIXING_SUPPORT", "")).strip() != "0":
        return
    key = "env.NCCL_GRAPH_MIXING_SUPPORT"
    eager = []
    if ctx.server.get("enable-dp-attention") is True or _int(ctx.server.get("attn-dp-size", 1)) > 1:
        eager.append("DP attention (its DP gather/scatter and the MoE dispatchers call all_gatherv/"
                     "reduce_scatterv, which always run on pynccl: parallel_state.py:1265, :1457)")
    if ctx.server.get("enable-pdmux") is True:
        eager.append("--enable-pdmux (turns pynccl on for good: parallel_state.py:2713-2715)")
    if ctx.server.get("enable-symm-mem") is True:
        eager.append("--enable-symm-mem (every TP all-reduce on pynccl, eager ones too: parallel_state.py:752-762)")
    for what in eager:
        yield ctx.finding(
            "error", "graph_mixing_off_with_eager_nccl", key,
            f"NCCL_GRAPH_MIXING_SUPPORT=0 with {what}: NCCL does not support a non-captured collective on a "
            "communicator while a graph launch that uses it is outstanding (NCCL docs env.rst, "
            "NCCL_GRAPH_MIXING_SUPPORT), so this can hang; remove NCCL_GRAPH_MIXING_SUPPORT or the flag",
        )
    if _int(ctx.server.get("dcp-size", ctx.server.get("decode-context-parallel-size", 1))) > 1:
        yield ctx.finding(
            "warning", "graph_mixing_off_with_eager_nccl", key,
            "SGLang already sets NCCL_GRAPH_MIXING_SUPPORT=0 under --dcp-size > 1 (engine.py:1916-1920); the "
            "profile's value changes nothing there: remove it",
        )
