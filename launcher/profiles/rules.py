"""Validation rules: each a small named function returning findings with a fix in the message.

Levels: error (refuse), warning (run, but say so), ineligible (cannot run on this host),
requires (depends on host facts that were not given; shown under the plan's `requires`).
"""

from __future__ import annotations

import difflib
import json
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
        """Decode/verify CUDA graphs, from every flag that can turn them off (cuda_graph_config.py)."""
        return not (
            self.server.get("disable-cuda-graph") is True
            or self.server.get("disable-decode-cuda-graph") is True
            or self.server.get("cuda-graph-backend-decode") == "disabled"
            or _graph_config_backend(self.server.get("cuda-graph-config"), "decode") == "disabled"
        )

    def tp_size(self) -> int | None:
        return _as_int(self.server.get("tp-size"))


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _graph_config_backend(raw: object, phase: str) -> str | None:
    """`backend` of one phase in --cuda-graph-config's JSON; None when absent or not parseable
    (the parser rule reports a malformed value)."""
    if not isinstance(raw, str):
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    settings = parsed.get(phase) if isinstance(parsed, dict) else None
    backend = settings.get("backend") if isinstance(settings, dict) else None
    return backend if isinstance(backend, str) else None


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


def _allows(value: str, proto: str) -> bool:
    """True when some collective may use `proto` (lower case) under this NCCL_PROTO value."""
    return any((proto not in toks) if exclude else (proto in toks) for exclude, toks in _sections(value))


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


# What SGLang's parent process writes into its own environment before it spawns the TP workers
# (sglang/srt/entrypoints/engine.py, _set_envs_and_config, docs/evidence.md "Parent-set variables").
# The workers are fresh interpreters (spawn, engine.py:1995), so sitecustomize re-applies the profile
# in each of them: a profile value wins over SGLang's in every worker, where the kernels run.
PARENT_SET_ENV = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "always 8 (engine.py:1921)",
    "NCCL_CUMEM_ENABLE": "0 when unset, 1 under --enable-symm-mem (engine.py:1898-1907)",
    "NCCL_NVLS_ENABLE": "0 when unset, 1 under --enable-nccl-nvls or --enable-symm-mem (engine.py:1908-1915)",
    "TRTLLM_ENABLE_PDL": "1 unless set to 0 (engine.py:1923-1925)",
}


@rule()
def cuda_device_max_connections(ctx: Context) -> Iterator[Finding]:
    """(c) SGLang sets 8 in its parent; the profile's value replaces it in every TP worker."""
    value = ctx.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if value is not None and str(value) != "8":
        yield ctx.finding(
            "warning",
            "cuda_device_max_connections",
            "env.CUDA_DEVICE_MAX_CONNECTIONS",
            f"CUDA_DEVICE_MAX_CONNECTIONS={value} replaces the 8 SGLang sets (engine.py:1921) in every TP worker "
            "(sitecustomize re-applies the profile in each); keep it only with a measurement behind it, "
            "else remove it from [env]",
        )


@rule()
def parent_set_env_conflict(ctx: Context) -> Iterator[Finding]:
    """A profile value that wins in the workers must not undo what a server flag needs."""
    needs = {
        "NCCL_CUMEM_ENABLE": [f for f in ("enable-symm-mem",) if ctx.server.get(f) is True],
        "NCCL_NVLS_ENABLE": [f for f in ("enable-symm-mem", "enable-nccl-nvls") if ctx.server.get(f) is True],
    }
    for name, flags in needs.items():
        if flags and str(ctx.env.get(name, "")) == "0":
            yield ctx.finding(
                "error",
                "parent_set_env_conflict",
                f"env.{name}",
                f"{name}=0 wins in every TP worker over the 1 SGLang sets for --{flags[0]} "
                f"({PARENT_SET_ENV[name]}), so that flag would run without it; remove {name} from [env]",
            )


@rule()
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


PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # pcie_ipc_ar.py:77 _SUPPORTED_WORLD_SIZES
_NOT_BF16 = {"half", "float16", "float", "float32"}


@rule()
def pcie_ipc_fallback(ctx: Context) -> Iterator[Finding]:
    """PCIe-IPC silently stays on NCCL outside world size 2/4/8, bf16, non-deterministic (pcie_ipc_ar.py)."""
    if str(ctx.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")) != "1":
        return
    key = "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
    tp = ctx.tp_size()
    if tp is not None and tp not in PCIE_IPC_WORLD_SIZES:
        yield ctx.finding(
            "error", "pcie_ipc_fallback", "server.tp-size",
            f"PCIe-IPC builds its channels for TP 2, 4 or 8 only (pcie_ipc_ar.py:77); at --tp-size {tp} every "
            "all-reduce stays on NCCL; set KIT_TP_SIZE to 2, 4 or 8, or use nccl-tuned",
        )
    dtype = str(ctx.server.get("dtype", "auto"))
    if dtype in _NOT_BF16:
        yield ctx.finding(
            "error", "pcie_ipc_fallback", "server.dtype",
            f"PCIe-IPC serves bf16 only (pcie_ipc_ar.py:118-123, 396-398); with --dtype {dtype} every "
            "all-reduce stays on NCCL; use dtype = \"bfloat16\" or another profile",
        )
    elif dtype == "auto":
        yield ctx.finding(
            "requires", "pcie_ipc_fallback", "server.dtype",
            "a bf16 model (PCIe-IPC serves bf16 only; --dtype auto follows the checkpoint's torch_dtype)",
        )
    if ctx.server.get("enable-deterministic-inference") is True:
        yield ctx.finding(
            "error", "pcie_ipc_fallback", key,
            "deterministic inference leaves PCIe-IPC off (pcie_ipc_ar.py:90-115), so every all-reduce stays on "
            "NCCL; remove enable-deterministic-inference or use nccl-tuned",
        )


@rule()
def fusion_over_pcie(ctx: Context) -> Iterator[Finding]:
    """trtllm fusion at TP > 2 over PCIe regressed upstream (sglang#32330; vllm#48075 without full NVLink)."""
    if not ctx.server.get("flashinfer-allreduce-fusion-backend"):
        return
    tp = ctx.tp_size()
    if ctx.is_pcie() and tp is not None and tp > 2:
        yield ctx.finding(
            "warning", "fusion_over_pcie", "server.flashinfer-allreduce-fusion-backend",
            f"trtllm all-reduce fusion over PCIe at TP {tp} is unproven: upstream SGLang closed SM12X fusion "
            "after a substantial TP4 PCIe regression (sglang#32330), and vLLM measured forced trtllm fusion "
            "about 10x slower without full NVLink (vllm#48075); compare it with baseline on this host "
            "(`make bench`) before using it",
        )


@rule()
def deepep_needs_rdma_nic(ctx: Context) -> Iterator[Finding]:
    """DeepEP low-latency kernels reach every rank through IBGDA, within one host too (DeepEP legacy.py)."""
    if not str(ctx.server.get("moe-a2a-backend", "none")).startswith("deepep"):
        return
    key = "server.moe-a2a-backend"
    nics = ctx.facts.rdma_nics if ctx.facts is not None else None
    if nics == []:
        yield ctx.finding(
            "ineligible", "deepep_needs_rdma_nic", key,
            "DeepEP's low-latency mode sends tokens through RDMA (IBGDA) even between GPUs of one host "
            "(DeepEP deep_ep/buffers/legacy.py:104-110, 561-563), and `launcher doctor` found no RDMA NIC; "
            "use the ep profile (NCCL all-to-all) instead",
        )
    elif nics is None:
        yield ctx.finding("requires", "deepep_needs_rdma_nic", key, "an RDMA NIC (mlx5 / InfiniBand) for DeepEP's IBGDA")
    if ctx.is_pcie():
        yield ctx.finding(
            "warning", "deepep_needs_rdma_nic", key,
            "DeepEP warns that PCIe peer connections may give memory-ordering errors in low-latency mode "
            "(deep_ep/buffers/legacy.py:56); check answers with `make bench` (correctness) before trusting it",
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
