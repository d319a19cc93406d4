"""The start-up lines SGLang 0.5.23 logs when a non-NCCL backend comes up, gives one up, or dies of one.

The stand-in prints them in SGLang's own format, one per TP rank, as each rank's scheduler would:
``[2026-11-30 10:00:01 TP3 EP3] message`` (``managers/scheduler.py:6279-6298``, ``utils/common.py:2630``;
texts from the wheel: launcher/runtime/activation.py lists where).

- A backend its argv and environment switch on gets its "up" line on every rank; a backend named in
  ``STANDIN_WITHHOLD_ACTIVATION`` gets SGLang's fallback warning instead (healthy, but running NCCL),
  and the ranks in ``STANDIN_ACTIVATION_MISSING_RANKS`` log nothing about it (up on some ranks only).
- Above 2 GPUs without ``--disable-custom-all-reduce`` every rank logs SGLang's warning that its custom
  all-reduce is off on PCIe-only GPUs (the stand-in plays a PCIe host).
- ``STANDIN_FAULT=mscclpp_init_failure``: what SGLang logs when MSCCL++ fails to start, which it raises
  again (``pymscclpp.py:1110-1115``) and nothing catches, so the scheduler dies and the launcher
  kills its tree (``scheduler.py:6370-6373``, ``engine.py:1976-1980``).

- Started with ``--speculative-adaptive``: SGLang's adaptive EAGLE lines (the section at the end).

The lines the stand-in adds carry "[SIMULATED]" at their end (or in the exception's message), so no
simulated line is ever taken for a real one.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping

from testsupport.standin.server_args import ServerArgs

MARK = " [SIMULATED]"
UP = {
    "fusion": "FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank={rank}, "
    "world_size={tp}, max_token_num=2048, hidden_dim=7168",
    "pcie-ipc": "FlashInfer PCIe-IPC workspace built (world={tp}, max_numel=917504, hidden=7168)",
    "mscclpp": "Created MSCCL++ communicator: group=tp world_size={tp} device=cuda:{rank} allreduce_configs=8 "
    "allgather_configs=0",
}
GAVE_UP = {
    "fusion": "Failed to initialize FlashInfer workspace (backend=trtllm): simulated. "
    "Disabling flashinfer allreduce fusion permanently.",
    "pcie-ipc": "FlashInfer PCIe-IPC workspace (max_numel=917504) failed: simulated; reductions stay on NCCL",
    "mscclpp": "PyMscclpp is unavailable because its dependencies failed to import: No module named 'cupy'",
}
CA_OFF = (
    "CustomAllReduceV2 is disabled because it's not supported on more than two PCIe-only GPUs. To silence this "
    "warning, specify disable_custom_all_reduce=True explicitly.",
    "CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this "
    "warning, specify disable_custom_all_reduce=True explicitly.",
)
FILLER = ("Decode batch, #running-req: 1, #token: 4096, token usage: 0.01, accept len: 2.00, accept rate: 0.50, "
          "cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0" + MARK)


def _flag_int(flags: list[str], *names: str) -> int:
    for i, tok in enumerate(flags):
        for name in names:
            if tok == name and i + 1 < len(flags):
                return int(flags[i + 1]) if flags[i + 1].isdigit() else 1
            if tok.startswith(name + "="):
                value = tok.split("=", 1)[1]
                return int(value) if value.isdigit() else 1
    return 1


def prefix(args: ServerArgs, rank: int | None) -> str:
    """SGLang's log prefix: the time, then the scheduler's rank tags (none for the launcher process)."""
    tags = ""
    if rank is not None:
        if args.tp_size > 1:
            tags += f" TP{rank}"
        if _flag_int(args.ignored_args, "--ep-size", "--expert-parallel-size", "--ep") > 1:
            tags += f" EP{rank}"
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{tags}] "


def switched_on(args: ServerArgs, environ: Mapping[str, str]) -> list[str]:
    """The backends this argv and environment ask SGLang for."""
    on = []
    flags = set(args.ignored_args)
    if "--flashinfer-allreduce-fusion-backend" in flags and "--enforce-disable-flashinfer-allreduce-fusion" not in flags:
        on.append("fusion")
    if environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "").lower() in ("1", "true"):
        on.append("pcie-ipc")
    if "--enable-mscclpp" in flags:
        on.append("mscclpp")
    return on


def parse_ranks(text: str) -> set[int]:
    return {int(r) for r in text.replace(" ", "").split(",") if r}


def startup_lines(args: ServerArgs, environ: Mapping[str, str], withhold: set[str],
                  missing_ranks: set[int] | frozenset[int] = frozenset()) -> list[str]:
    lines = []
    tp = max(1, args.tp_size)
    for rank in range(tp):
        if tp > 2 and "--disable-custom-all-reduce" not in args.ignored_args:
            lines += [prefix(args, rank) + text + MARK for text in CA_OFF]
        if rank in missing_ranks:
            continue
        for name in switched_on(args, environ):
            text = GAVE_UP[name] if name in withhold else UP[name].format(tp=tp, rank=rank)
            lines.append(prefix(args, rank) + text + MARK)
    return lines


def mscclpp_failure_lines(args: ServerArgs) -> list[str]:
    """What a TP rank logs when MSCCL++ fails to start, then the launcher's line before it kills the tree."""
    site = "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed"
    exc = "RuntimeError: SIMULATED MSCCL++ executor setup failed: no IPC path between GPU 0 and GPU 3"
    tb = [
        "Traceback (most recent call last):",
        f'  File "{site}/device_communicators/pymscclpp.py", line 1112, in __init__',
        "    self._create_algorithms()",
        exc,
    ]
    lines = [prefix(args, 0) + "Failed to initialize MSCCL++ collectives", *tb,
             prefix(args, 0) + "Scheduler hit an exception: Traceback (most recent call last):",
             f'  File "{site}/parallel_state.py", line 472, in __init__',
             "    self.pymscclpp_comm = PyMscclppCommunicator(",
             exc,
             prefix(args, None) + "Received sigquit from a child process. It usually means the child failed."]
    return lines


def write_filler(megabytes: float) -> None:
    """SGLang-like decode log lines, `megabytes` of them, to stderr (a chatty server)."""
    line = prefix_plain() + FILLER + "\n"
    block = line * max(1, (1 << 20) // len(line))
    left = int(megabytes * (1 << 20))
    while left > 0:
        chunk = block[:left] if left < len(block) else block
        cut = chunk.rfind("\n") + 1 or len(chunk)
        sys.stderr.write(chunk[:cut])
        left -= cut
    sys.stderr.flush()


def prefix_plain() -> str:
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] "


# ----- adaptive EAGLE (--speculative-adaptive) -----------------------------------------------------
# SGLang 0.5.23's adaptive EAGLE lines (--speculative-adaptive), as the stand-in prints them.
#
# - Started with ``--speculative-adaptive``: the TP rank 0 scheduler logs "AdaptiveSpeculativeParams
#   initialized: steps=S, candidate_steps=[...]" for the first (smallest) batch-size tier of the config
#   (``--speculative-adaptive-config`` FILE, else SGLang's default tiers), before the server is ready
#   (``speculative/adaptive_spec_params.py:297-303``, from the EAGLE worker's init, ``eagle_worker_v2.py:1346-1355``).
# - Where SGLang would turn it off (``adaptive_unsupported_reason``, ``adaptive_spec_params.py:56-100``: an
#   algorithm other than EAGLE/EAGLE3, top-k other than 1, DP attention, multi-layer EAGLE, two-batch overlap,
#   pdmux), or when ``STANDIN_ADAPTIVE_DISABLED`` gives a reason, the launcher process logs "speculative_adaptive
#   disabled: <reason>. Falling back to static speculative params." (``arg_groups/speculative_hook.py:1379-1384``)
#   instead, and nothing adapts.
# - ``STANDIN_ADAPTIVE_STEPS=1,3``: after each finished generation request, the next of these steps, logged as
#   SGLang's "Adaptive spec params updated: steps X -> Y (ema_accept_len=E)" on TP rank 0
#   (``adaptive_spec_params.py:263-270``); the list used up, nothing more changes.
#
# The lines end in "[SIMULATED]", as every line the stand-in adds.

ADAPTIVE_FLAG = "--speculative-adaptive"
ADAPTIVE_CONFIG_FLAG = "--speculative-adaptive-config"
ADAPTIVE_DEFAULT_TIERS = {1: [1, 3, 5, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}  # adaptive_spec_params.py:28-53
ADAPTIVE_FALLBACK = "Falling back to static speculative params."


def adaptive_requested(args: ServerArgs) -> bool:
    return ADAPTIVE_FLAG in args.ignored_args


def _flag_value(args: ServerArgs, flag: str) -> str | None:
    it = iter(args.ignored_args)
    for tok in it:
        if tok == flag:
            return next(it, None)
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


def adaptive_tiers(args: ServerArgs) -> dict[int, list[int]]:
    """The config's batch-size tiers (SGLang's defaults without a file)."""
    path = _flag_value(args, ADAPTIVE_CONFIG_FLAG)
    if not path:
        return dict(ADAPTIVE_DEFAULT_TIERS)
    with open(path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    return {int(k): sorted(set(v["candidate_steps"])) for k, v in cfg.items() if k.isdigit()}


def adaptive_disabled_reason(args: ServerArgs, forced: str = "") -> str | None:
    """Why SGLang would run static speculation although --speculative-adaptive was given, or None."""
    if forced:
        return forced
    algo = args.speculative_algorithm
    if (algo or "").upper() not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if args.speculative_eagle_topk is not None and args.speculative_eagle_topk != 1:
        return f"speculative_eagle_topk={args.speculative_eagle_topk} (only topk=1 is supported)"
    flags = set(args.ignored_args)
    if "--enable-dp-attention" in flags:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if "--enable-multi-layer-eagle" in flags:
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if "--enable-two-batch-overlap" in flags:
        return ("enable_two_batch_overlap=True is not supported (adaptive state swap would discard the "
                "TboAttnBackend wrapper)")
    if "--enable-pdmux" in flags:
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


def adaptive_starting_steps(args: ServerArgs) -> tuple[int, list[int]]:
    """(steps, candidate steps) of the first tier: the given steps when they are a candidate, else the middle one."""
    first = adaptive_tiers(args)[min(adaptive_tiers(args))]
    steps = args.speculative_num_steps
    return (steps if steps in first else first[len(first) // 2]), first


def adaptive_disabled_line(reason: str) -> str:
    return prefix_launcher() + f"speculative_adaptive disabled: {reason}. {ADAPTIVE_FALLBACK}" + MARK


def adaptive_init_line(args: ServerArgs) -> str:
    steps, candidates = adaptive_starting_steps(args)
    return prefix(args, 0) + f"AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={candidates}" + MARK


def adaptive_update_line(args: ServerArgs, old: int, new: int, ema: float) -> str:
    return prefix(args, 0) + f"Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})" + MARK


def prefix_launcher() -> str:
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] "


def parse_steps(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]
