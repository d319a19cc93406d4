"""All-reduce backends (PCIe-IPC, FlashInfer/trtllm fusion, torch symm-mem): when each silently
falls back, fails to start, or is slower than NCCL on a PCIe host."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding, _as_int, _decode_max_bs

FUSION_PATCH = "sm120-allreduce-fusion"


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
            "NCCL; remove enable-deterministic-inference, or run it on a profile that leaves NCCL_ALGO and the "
            "NCCL channel counts to SGLang (baseline; not nccl-tuned or a profile extending it, whose values "
            "would replace SGLang's deterministic ones in every TP worker)",
        )


def fusion_over_pcie(ctx: Context) -> Iterator[Finding]:
    """trtllm fusion at TP > 2 over PCIe regressed upstream (sglang#32330; vllm#48075 without full NVLink)."""
    if not ctx.server.get("flashinfer-allreduce-fusion-backend"):
        return
    tp = ctx.tp_size()
    pcie = ctx.is_pcie()
    if pcie is None and (tp is None or tp > 2):
        yield ctx.finding(
            "requires", "fusion_over_pcie", "server.flashinfer-allreduce-fusion-backend",
            "an NVLink host, or TP 2: trtllm all-reduce fusion over PCIe at TP > 2 is unproven and regressed "
            "upstream (sglang#32330, vllm#48075); with a PCIe host's facts `launcher check` warns",
        )
    if pcie and tp is not None and tp > 2:
        yield ctx.finding(
            "warning", "fusion_over_pcie", "server.flashinfer-allreduce-fusion-backend",
            f"trtllm all-reduce fusion over PCIe at TP {tp} is unproven: upstream SGLang closed SM12X fusion "
            "after a substantial TP4 PCIe regression (sglang#32330), and vLLM measured forced trtllm fusion "
            "about 10x slower without full NVLink (vllm#48075); compare it with baseline on this host "
            "(`make bench`) before using it",
        )


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


# SGLang's own view of decode-sized rows: the autotune profiles powers of two up to 512 rows
# ("Powers of two cover the captured decode batches", pcie_ipc_ar.py:181-194).
PCIE_IPC_DECODE_ROWS = 512

_EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
# SGLang's auto-pick when --speculative-num-steps is unset: 4 draft tokens (3, 1, 4) for every target
# but Llama and Grok, which get 8 (5, 4, 8) (speculative_hook.py:1159-1172, 1430-1461); the kit's
# model overlays are DeepSeek-V3 and Kimi-K2 (3, 1, 4).
AUTO_EAGLE_DRAFT_TOKENS = 4
# NGRAM without --speculative-num-draft-tokens verifies 12 tokens a request (speculative_hook.py:1314-1322).
NGRAM_DEFAULT_DRAFT_TOKENS = 12


def _tokens_per_request(ctx: Context) -> tuple[int, str]:
    """Rows each request adds to a decode (verify) reduction, as SGLang 0.5.23 resolves them from the flags:
    the verify width is --speculative-num-draft-tokens (model_runner.py:876-895, spec_info.py:291-301)."""
    algo = str(ctx.server.get("speculative-algorithm") or "").upper()
    if not algo:
        return 1, ""
    drafts = _as_int(ctx.server.get("speculative-num-draft-tokens"))
    if algo == "NGRAM":
        if drafts is None:
            return NGRAM_DEFAULT_DRAFT_TOKENS, "n-gram's default draft tokens (speculative_hook.py:1314-1322)"
        return drafts, "--speculative-num-draft-tokens"
    if algo in _EAGLE_FAMILY:
        steps, topk = _as_int(ctx.server.get("speculative-num-steps")), _as_int(ctx.server.get("speculative-eagle-topk"))
        if steps is None and drafts is None:
            return AUTO_EAGLE_DRAFT_TOKENS, "SGLang's auto-picked draft tokens (speculative_hook.py:1159-1172)"
        if steps is not None and topk == 1:  # SGLang overrides any other draft-token count here
            return steps + 1, "steps + 1 at top-k 1 (speculative_hook.py:1255-1266)"
    if drafts is None:
        return AUTO_EAGLE_DRAFT_TOKENS, f"draft tokens unset under {algo}, taken as {AUTO_EAGLE_DRAFT_TOKENS}"
    return drafts, "--speculative-num-draft-tokens"


def pcie_ipc_prefill_rows(ctx: Context) -> Iterator[Finding]:
    """PCIe-IPC's workspace is the widest captured decode batch x tokens per request rows (base_runner.py:367-390,
    pcie_ipc_ar.py:247-276); a prefill chunk of at most that many tokens takes the one-shot kernel too."""
    if str(ctx.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")) != "1" or ctx.env.get("SGLANG_PCIE_IPC_MAX_NUMEL"):
        return
    max_bs, source = _decode_max_bs(ctx)
    per_request, why = _tokens_per_request(ctx)
    rows = max_bs * per_request
    if rows <= PCIE_IPC_DECODE_ROWS:
        return
    per = f" x {per_request} tokens a request ({why})" if per_request > 1 else ""
    yield ctx.finding(
        "warning", "pcie_ipc_prefill_rows", "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
        f"PCIe-IPC sizes its workspace for {max_bs} requests ({source}){per} = {rows} rows "
        f"(base_runner.py:367-390), above the {PCIE_IPC_DECODE_ROWS} rows its start-up autotune measures "
        f"(pcie_ipc_ar.py:181-194), so every prefill chunk of up to {rows} tokens also takes the one-shot kernel; "
        "SGLang measured a decode-sized workspace level with NCCL on TTFT and a prefill-sized one at +66% "
        "(pcie_ipc_ar.py:36-48), and nothing measured one in between; lower max-running-requests or "
        f"cuda-graph-max-bs-decode under [server] to {PCIE_IPC_DECODE_ROWS // per_request} or less",
    )


def pcie_ipc_adaptive_tiers(ctx: Context) -> Iterator[Finding]:
    """Under --speculative-adaptive SGLang builds the PCIe-IPC workspace once, for the widest captured batch x the
    starting point's steps + 1 (base_runner.py:350-390, speculative_hook.py:1423-1427), never rebuilds it
    (pcie_ipc_ar.py:253-254, 316-317) and sends a wider reduction to NCCL without a word (pcie_ipc_ar.py:402-403):
    a tier running more steps on batches as wide is refused (launcher/profiles/pcie_workspace.py)."""
    from launcher.profiles.pcie_workspace import plan_fit

    found = plan_fit(ctx)
    if found is None or not found.fit.overflows:
        return
    fit, fix = found.fit, found.fixes
    tier = fit.overflows[0]
    start = fit.start_steps
    batches = f"batch {tier.first}" if tier.first == tier.last else f"batches {tier.first}-{tier.last}"
    padded = f", padded to the captured batch {tier.graph}" if tier.graph != tier.last else ""
    ways = []
    if fix.start_steps is not None:
        s = fix.start_steps
        ways.append(f"start from {s} steps (--spec-params {s},1,{s + 1}: {fit.max_batch} x {s + 1} = "
                    f"{fit.max_batch * (s + 1)} rows)")
    ways.append("give " + ", ".join(f"tier {t.tier} at most {fit.workspace_rows // t.graph - 1} steps"
                                    for t in fit.overflows))
    tuned_keys = ctx.adaptive_tiers or {}
    if fix.max_requests is not None and all(b <= fix.max_requests for b in tuned_keys):
        ways.append(f"cap the batches with max-running-requests = {fix.max_requests} under [server] (the request "
                    "pool clamps the captured batches; cuda-graph-max-bs-decode alone leaves wider batches to eager "
                    "decode, whose reductions are as wide)")
    ways.append(f"set SGLANG_PCIE_IPC_MAX_NUMEL under [env] to {fix.numel_rows} x the model's hidden size "
                "(pcie_ipc_ar.py:259-261)")
    yield ctx.finding(
        "error", "pcie_ipc_adaptive_tiers", "server.speculative-num-steps",
        f"adaptive tier {tier.tier} ({found.tiers_source}) runs up to {tier.steps} steps on {batches}{padded}: "
        f"its widest verify all-reduce is {tier.graph} x {tier.steps + 1} = {tier.rows} rows, wider than the "
        f"{fit.workspace_rows}-row PCIe-IPC workspace SGLang builds once from the starting point: "
        f"{fit.max_batch} requests x {start + 1} tokens at {start} starting step{'s' if start != 1 else ''} "
        f"(base_runner.py:350-390, speculative_hook.py:1423-1427; {fit.max_batch}: {found.batches_source}), "
        "never rebuilt (pcie_ipc_ar.py:253-254, 316-317), so those reductions "
        "run on NCCL without a word (pcie_ipc_ar.py:402-403) while the plan reports PCIe-IPC"
        + "; " + ", or ".join(ways),
    )
