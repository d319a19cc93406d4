"""Validation rules: each a small named function returning findings with a fix in the message.

Levels: error (refuse), warning (run, but say so), ineligible (cannot run on this host),
requires (depends on host facts that were not given; shown under the plan's `requires`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from launcher.profiles.hostfacts import HostFacts
from launcher.profiles.loader import Resolved
from launcher.profiles.nccl_names import KNOWN_NCCL_ENV

Level = Literal["error", "warning", "ineligible", "requires"]
FUSION_PATCH = "sm120-allreduce-fusion"


@dataclass
class Finding:
    level: Level
    rule: str
    key: str
    message: str
    file: Path | None = None

    def render(self) -> str:
        where = f"{self.file}: key '{self.key}': " if self.file else (f"key '{self.key}': " if self.key else "")
        return f"{where}{self.message}"


@dataclass
class Context:
    resolved: Resolved
    spec: str
    env: dict[str, str]
    server: dict[str, object]
    facts: HostFacts | None
    flags: list[str] = field(default_factory=list)

    def origin(self, key: str) -> Path | None:
        return self.resolved.origin.get(key)

    def finding(self, level: Level, rule: str, key: str, message: str) -> Finding:
        return Finding(level, rule, key, message, self.origin(key))

    def is_pcie(self) -> bool | None:
        """From host facts when given, else from what the profile says it requires."""
        if self.facts is not None and self.facts.is_pcie is not None:
            return self.facts.is_pcie
        wanted = self.resolved.requires.interconnect
        return {"pcie": True, "nvlink": False}.get(wanted or "any")

    def sm_versions(self) -> set[str] | None:
        if self.facts is not None and self.facts.sm_versions:
            return self.facts.sm_versions
        return set(self.resolved.requires.sm) if self.resolved.requires.sm else None

    def cuda_graphs_on(self) -> bool:
        return not (
            self.server.get("disable-cuda-graph") is True
            or self.server.get("disable-decode-cuda-graph") is True
            or self.server.get("cuda-graph-backend-decode") == "disabled"
        )


Rule = Callable[[Context], Iterator[Finding]]
RULES: list[tuple[Rule, bool]] = []


def rule(needs_parser: bool = False) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES.append((fn, needs_parser))
        return fn

    return register


def evaluate(ctx: Context, use_parser: bool = False) -> list[Finding]:
    out: list[Finding] = []
    for fn, needs_parser in RULES:
        if needs_parser and not use_parser:
            continue
        out.extend(fn(ctx))
    return out


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


def _algo_has_tree(value: str) -> bool:
    """True when some collective is told to use Tree (an exclusion list never selects it by name)."""
    return any(not exclude and "tree" in toks for exclude, toks in _sections(value))


@rule()
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


@rule()
def ll128_on_pcie(ctx: Context) -> Iterator[Finding]:
    """(b) LL128 relies on 128-byte store ordering that PCIe does not guarantee: silent corruption."""
    proto = ctx.env.get("NCCL_PROTO")
    if not proto:
        return
    allows = any(("ll128" not in toks) if exclude else ("ll128" in toks) for exclude, toks in _sections(proto))
    if not allows:
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


@rule()
def cuda_device_max_connections(ctx: Context) -> Iterator[Finding]:
    """(c) SGLang's engine overwrites it with 8 (engine.py:_set_envs_and_config)."""
    if "CUDA_DEVICE_MAX_CONNECTIONS" in ctx.env:
        yield ctx.finding(
            "warning",
            "cuda_device_max_connections",
            "env.CUDA_DEVICE_MAX_CONNECTIONS",
            "CUDA_DEVICE_MAX_CONNECTIONS is overwritten with 8 by SGLang at start-up; remove it from the profile",
        )


@rule()
def expandable_segments_with_pcie_ipc(ctx: Context) -> Iterator[Finding]:
    """(d) The PCIe one-shot all-reduce crashed with expandable segments (pcie_allreduce.cu:321)."""
    conf = ctx.env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    if "expandable_segments:true" in conf and ctx.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1":
        yield ctx.finding(
            "error",
            "expandable_segments_with_pcie_ipc",
            "env.PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True cannot be combined with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 (IPC handles "
            "of expandable segments crash the PCIe all-reduce); set PYTORCH_CUDA_ALLOC_CONF = false in [env]",
        )


@rule(needs_parser=True)
def sglang_flags(ctx: Context) -> Iterator[Finding]:
    """(e) Unknown, abbreviated, aliased or deprecated flags, and values SGLang's parser rejects."""
    from launcher.profiles import sglang_args

    for flag, message in sglang_args.flag_problems(ctx.flags):
        key = f"server.{flag[2:]}" if flag else "server"
        yield ctx.finding("error", "sglang_flags", key, message)


@rule()
def deepep_normal_mode(ctx: Context) -> Iterator[Finding]:
    """(f) DeepEP normal mode needs NVLink (DeepEP#216) and disables CUDA graphs (moe_hook.py:384)."""
    if not str(ctx.server.get("moe-a2a-backend", "none")).startswith("deepep"):
        return
    if ctx.server.get("deepep-mode", "auto") != "normal":
        return
    pcie = ctx.is_pcie()
    msg = "DeepEP normal mode needs NVLink and turns CUDA graphs off; use deepep-mode = \"low_latency\""
    if pcie:
        yield ctx.finding("error", "deepep_normal_mode", "server.deepep-mode", msg)
    else:
        yield ctx.finding("warning", "deepep_normal_mode", "server.deepep-mode", "DeepEP normal mode disables CUDA graphs")
        if pcie is None:
            yield ctx.finding("requires", "deepep_normal_mode", "server.deepep-mode", "an NVLink host (DeepEP normal mode)")


@rule()
def symm_mem_eligibility(ctx: Context) -> Iterator[Finding]:
    """(g) Torch symm-mem needs SM 9.x/10.x (all_reduce_utils.py) and NVLink multicast (torch_symm_mem.py:116)."""
    if ctx.server.get("enable-torch-symm-mem") is not True:
        return
    sms, pcie = (ctx.facts.sm_versions if ctx.facts else None), (ctx.facts.is_pcie if ctx.facts else None)
    if not sms and pcie is None:
        yield ctx.finding("requires", "symm_mem_eligibility", "server.enable-torch-symm-mem", "SM 9.x/10.x GPUs with NVLink multicast (torch symm-mem)")
        return
    bad_sm = sorted(s for s in (sms or set()) if s.split(".")[0] not in ("9", "10"))
    if bad_sm:
        yield ctx.finding("ineligible", "symm_mem_eligibility", "server.enable-torch-symm-mem", f"torch symm-mem needs SM 9.x/10.x, this host has SM {', '.join(bad_sm)}; pick another profile")
    if pcie:
        yield ctx.finding("ineligible", "symm_mem_eligibility", "server.enable-torch-symm-mem", "torch symm-mem needs NVLink multicast, this host is PCIe-only; pick another profile")


@rule()
def fusion_needs_sm120_patch(ctx: Context) -> Iterator[Finding]:
    """(h) On SM120 unpatched SGLang raises at workspace init (flashinfer_comm_fusion.py:46)."""
    fusion = ctx.server.get("flashinfer-allreduce-fusion-backend") or ctx.server.get("enable-flashinfer-allreduce-fusion")
    if not fusion:
        return
    if FUSION_PATCH in (ctx.resolved.requires.patches or []):
        return
    sms = ctx.sm_versions()
    key = "server.flashinfer-allreduce-fusion-backend"
    if sms is None:
        yield ctx.finding("requires", "fusion_needs_sm120_patch", key, f"SM 9.x/10.x GPUs, or the '{FUSION_PATCH}' patch on SM 12.0")
    elif any(s.startswith("12.") for s in sms):
        yield ctx.finding("error", "fusion_needs_sm120_patch", key, f"FlashInfer all-reduce fusion on SM120 needs the '{FUSION_PATCH}' patch; add patches = [\"{FUSION_PATCH}\"] under [requires]")


@rule()
def unknown_nccl_env(ctx: Context) -> Iterator[Finding]:
    """(i) NCCL silently ignores misspelt variables."""
    for name in ctx.env:
        if name.startswith("NCCL_") and name not in KNOWN_NCCL_ENV:
            close = difflib.get_close_matches(name, KNOWN_NCCL_ENV, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else "; NCCL ignores unknown variables"
            yield ctx.finding("warning", "unknown_nccl_env", f"env.{name}", f"unknown NCCL variable {name}{hint}")


@rule()
def speculation_in_profile(ctx: Context) -> Iterator[Finding]:
    """Speculation is its own axis (--spec); a profile that sets it silently fights the overlay."""
    for key, path in ctx.resolved.origin.items():
        if key.startswith("server.speculative-") and path.parent.name != "spec":
            yield ctx.finding("warning", "speculation_in_profile", key, f"{key[7:]} belongs to the spec overlay; choose the mode with --spec instead")


@rule()
def host_requirements(ctx: Context) -> Iterator[Finding]:
    """A profile's [requires] against the host facts, when given."""
    f, req = ctx.facts, ctx.resolved.requires
    if f is None:
        return
    if req.sm and f.sm_versions and not f.sm_versions <= set(req.sm):
        yield ctx.finding("ineligible", "host_requirements", "requires.sm", f"needs SM {', '.join(req.sm)}, host has {', '.join(sorted(f.sm_versions))}")
    if req.interconnect == "nvlink" and f.is_pcie:
        yield ctx.finding("ineligible", "host_requirements", "requires.interconnect", f"needs NVLink, host interconnect is {f.interconnect}")
    if req.interconnect == "pcie" and f.is_pcie is False:
        yield ctx.finding("ineligible", "host_requirements", "requires.interconnect", "tuned for PCIe-only hosts; on NVLink SGLang's own custom all-reduce is the better choice (use baseline)")
    if req.p2p and f.p2p_ok is False:
        pairs = ", ".join(f"GPU{a} and GPU{b}" for a, b in f.p2p_bad_pairs[:3]) or "some GPUs"
        yield ctx.finding("ineligible", "host_requirements", "requires.p2p", f"needs GPU peer-to-peer access; P2P is not OK between {pairs} (see `launcher doctor`)")
    if req.nvlink_multicast and f.nvlink_multicast is False:
        yield ctx.finding("ineligible", "host_requirements", "requires.nvlink_multicast", "needs NVLink multicast, which this host lacks")


@rule()
def fusion_disabled_by_enforce(ctx: Context) -> Iterator[Finding]:
    """The enforce flag always wins (overrides.py:1006): a fusion backend beside it does nothing."""
    if ctx.server.get("flashinfer-allreduce-fusion-backend") and ctx.server.get("enforce-disable-flashinfer-allreduce-fusion") is True:
        yield ctx.finding(
            "error",
            "fusion_disabled_by_enforce",
            "server.flashinfer-allreduce-fusion-backend",
            "has no effect while enforce-disable-flashinfer-allreduce-fusion is on (base.toml sets it); "
            "add enforce-disable-flashinfer-allreduce-fusion = false under [server]",
        )


@rule()
def gpu_count(ctx: Context) -> Iterator[Finding]:
    """Tensor/expert parallel sizes larger than the host's GPU count fail at start-up."""
    if ctx.facts is None or not ctx.facts.gpus:
        return
    n = len(ctx.facts.gpus)
    for key in ("tp-size", "ep-size"):
        raw = ctx.server.get(key)
        if isinstance(raw, str) and raw.isdigit() and int(raw) > n:
            yield ctx.finding("ineligible", "gpu_count", f"server.{key}", f"--{key} {raw} needs {raw} GPUs, this host has {n}; export KIT_TP_SIZE={n}")
