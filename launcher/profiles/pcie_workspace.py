"""The PCIe-IPC all-reduce workspace against the tiers of an adaptive EAGLE-3 config: the rows each tier's verify
all-reduce needs at the widest captured batch it serves, and the rows the workspace SGLang 0.5.23 builds holds.

What SGLang does (paths under sglang/srt/ of the pinned wheel):
* the workspace is built once, before the first graph capture of the target model, for the widest captured decode
  batch x the tokens a request verifies at the starting point: `_pre_initialize_pcie_ipc_workspace` and
  `_widest_decode_rows` (model_executor/runner/base_runner.py:350-390), run once per model runner
  (`mr._kernel_warmed_up`, :256-262) from the startup decode graph runner (decode_cuda_graph_runner.py:1253-1256);
* under --speculative-adaptive the tokens a request verifies at the start are --speculative-num-steps + 1
  (arg_groups/speculative_hook.py:1423-1427; the start is the middle candidate when unset, :1404-1409), so the
  workspace is `max captured batch x (start steps + 1)` rows (x hidden elements);
* it is never rebuilt: `_ensure_workspace` returns once one exists (distributed/device_communicators/
  pcie_ipc_ar.py:253-254) and `prepare` does too (:316-317); the other candidate steps' verify graphs are captured
  later on the same model runner (speculative/eagle_worker_v2.py:1387-1414, `init_states` in
  speculative/adaptive_runtime_state.py:103-120, `build_adaptive_runtime_state` at eagle_worker_v2.py:1777-1825)
  with `steps + 1` draft tokens each;
* a batch is served by the largest tier at or below its size, the lowest tier when none is (`_route`,
  `_find_closest_bs`, speculative/adaptive_spec_params.py:342-358); the router pads it first only to the raw
  --cuda-graph-bs-decode list (`init_states(cuda_graph_bs=get_exec().graph.cuda_graph_bs_decode)`,
  eagle_worker_v2.py:1408-1414; the field is the flag, default None, arg_groups/fields/exec_.py:640-643, never filled
  from the resolved capture list), and only then prunes a step's graphs to the sizes its tiers reach
  (`cuda_graph_bs_for_step`, :328-340); without the flag every step's verify graph covers every captured size;
* the verify graph runs the batch padded to the captured size at or above it, so the batch's verify all-reduce is
  that captured size x (the step + 1) rows, and a tier's widest verify is the captured size its largest batch pads to
  x (its largest candidate step + 1);
* a reduction of more elements than the workspace goes to NCCL with no log line (pcie_ipc_ar.py:402-403), while the
  start-up line "FlashInfer PCIe-IPC workspace built" (:298-303) is what tells the kit PCIe-IPC is active;
* `SGLANG_PCIE_IPC_MAX_NUMEL` (environ.py:1540) replaces the derivation with a fixed element count (pcie_ipc_ar.py:
  259-261); it counts elements (rows x the model's hidden size), which a plan does not know.

The captured batches are SGLang's speculative default list (arg_groups/cuda_graph_hook.py:500-532) up to the decode
graph's max batch, or the list the flags give, clamped to the request pool (model_executor/runner/
base_cuda_graph_runner.py:65-110); the max batch and the pool are the ones rule `pcie_ipc_prefill_rows` reads
(launcher/profiles/rules/allreduce.py). Rule `pcie_ipc_adaptive_tiers` there refuses a plan whose widest tier does
not fit, naming the tier and each fix `fixes` finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.profiles import running_requests
from launcher.profiles.rules.context import Context, _as_int, _decode_max_bs, graph_config
from launcher.profiles.tier_routing import Routing, read_config

# SGLang's tiers without a --speculative-adaptive-config file (adaptive_spec_params.py:28-53).
DEFAULT_TIERS: dict[int, list[int]] = {1: [1, 3, 5, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}


@dataclass(frozen=True)
class TierRows:
    """One tier's widest verify all-reduce: `graph` (the captured size its largest batch pads to) x (`steps` + 1)."""

    tier: int
    steps: int  # the tier's largest candidate step
    first: int  # the smallest batch the tier serves
    last: int  # the largest batch the tier serves (at most the widest captured batch)
    graph: int  # the captured batch size `last` runs padded to
    rows: int


@dataclass(frozen=True)
class Fit:
    """The workspace the starting point builds, against every tier that serves a captured batch."""

    start_steps: int
    max_batch: int  # the widest captured batch
    workspace_rows: int  # max_batch x (start_steps + 1)
    tiers: tuple[TierRows, ...]

    @property
    def widest(self) -> TierRows | None:
        """The tier of the most rows (the lowest such tier on a tie)."""
        return max(self.tiers, key=lambda t: (t.rows, -t.tier), default=None)

    @property
    def overflows(self) -> tuple[TierRows, ...]:
        """The tiers whose widest verify is wider than the workspace, widest first."""
        return tuple(sorted((t for t in self.tiers if t.rows > self.workspace_rows), key=lambda t: (-t.rows, t.tier)))


def spec_capture_sizes(max_bs: int, padding: bool = True) -> list[int]:
    """SGLang's decode capture list under speculation for a max batch (cuda_graph_hook.py:500-532); every size
    from 1 with --disable-cuda-graph-padding (:507-508)."""
    if not padding:
        return list(range(1, max_bs + 1))
    sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def clamp(batches: Sequence[int], cap: int) -> list[int]:
    """The capture list clamped to `cap` requests, as the request pool clamps it (base_cuda_graph_runner.py:92-102):
    the sizes up to `cap`, and `cap` itself when the list went above it."""
    return sorted({b for b in batches if b <= cap} | ({cap} if batches and max(batches) > cap else set()))


def router_batches(ctx: Context) -> list[int] | None:
    """The list the adaptive router pads a batch to: --cuda-graph-bs-decode as given, unclamped; None without it
    (eagle_worker_v2.py:1408-1414 reads the flag's field, which --cuda-graph-config's decode.bs never fills)."""
    bs = ctx.server.get("cuda-graph-bs-decode")
    sizes = [_as_int(b) for b in (bs if isinstance(bs, list) else str(bs).split())] if bs else []
    if sizes and all(s is not None and s > 0 for s in sizes):
        return sorted({s for s in sizes if s is not None})
    return None


def _explicit_sizes(ctx: Context) -> list[int] | None:
    """The decode capture list the flags give: --cuda-graph-config's decode.bs wins over --cuda-graph-bs-decode
    (cuda_graph_hook.py:66-95)."""
    sizes = graph_config(ctx.server.get("cuda-graph-config"), "decode").get("bs")
    if isinstance(sizes, list) and sizes and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in sizes):
        return sorted(set(sizes))
    return router_batches(ctx)


def captured_batches(ctx: Context) -> tuple[list[int], str]:
    """The decode batch sizes SGLang captures for this plan, clamped to the request pool, and where their top
    comes from (the words of rule `pcie_ipc_prefill_rows`)."""
    max_bs, source = _decode_max_bs(ctx)
    sizes = _explicit_sizes(ctx)
    if sizes is None:
        sizes = spec_capture_sizes(max_bs, padding=ctx.server.get("disable-cuda-graph-padding") is not True)
    pool, _ = running_requests.resolve(ctx.server)
    if pool is not None:
        sizes = clamp(sizes, pool)
    return sizes, source


def _pad(sizes: Sequence[int], batch: int) -> int:
    """The captured size at or above `batch` in sorted `sizes`, else the batch itself: how the graph runner pads
    a verify (base_cuda_graph_runner.py:166-180)."""
    return next((s for s in sizes if s >= batch), batch)


def fit(tiers: Mapping[int, Sequence[int]], start_steps: int, batches: Sequence[int],
        router: Sequence[int] | None = None) -> Fit:
    """Each tier's widest verify (rows) against the workspace `max(batches) x (start_steps + 1)`.

    Every batch from 1 to the widest captured one is routed by its own size, or padded to `router` (the raw
    --cuda-graph-bs-decode list) first, to the largest tier at or below it, else the lowest (adaptive_spec_params.py:
    342-358); it verifies padded to the captured size at or above it. A tier no batch reaches is left out."""
    keys = sorted(tiers)
    captured = sorted(set(batches))
    routing = Routing(capture=tuple(sorted(set(router))) if router else None)  # SGLang's router, one copy
    served: dict[int, list[int]] = {}
    for b in range(1, captured[-1] + 1):
        key = routing.padded(b)
        tier = max((k for k in keys if k <= key), default=keys[0])
        served.setdefault(tier, []).append(b)
    rows = []
    for tier, sizes in sorted(served.items()):
        steps, graph = max(tiers[tier]), _pad(captured, sizes[-1])
        rows.append(TierRows(tier=tier, steps=steps, first=sizes[0], last=sizes[-1], graph=graph,
                             rows=graph * (steps + 1)))
    top = captured[-1]
    return Fit(start_steps=start_steps, max_batch=top, workspace_rows=top * (start_steps + 1), tiers=tuple(rows))


@dataclass(frozen=True)
class Fixes:
    """What makes the widest tier fit, each None where nothing of its kind does."""

    start_steps: int | None  # the smallest candidate step, above the start, whose workspace holds the widest tier
    max_requests: int | None  # the largest request pool under which every tier fits
    numel_rows: int  # the rows SGLANG_PCIE_IPC_MAX_NUMEL must hold (x the model's hidden size)


def fixes(tiers: Mapping[int, Sequence[int]], start_steps: int, batches: Sequence[int],
          router: Sequence[int] | None = None) -> Fixes:
    """The ways out of an overflow besides fewer steps in the tier: a larger start, a smaller request pool, a fixed
    workspace."""
    current = fit(tiers, start_steps, batches, router)
    widest = current.widest
    need = widest.rows if widest else 0
    union = sorted({s for steps in tiers.values() for s in steps})
    start = next((s for s in union if s > start_steps and current.max_batch * (s + 1) >= need), None)
    cap = next((c for c in range(current.max_batch - 1, 0, -1)
                if not fit(tiers, start_steps, clamp(batches, c), router).overflows), None)
    return Fixes(start_steps=start, max_requests=cap, numel_rows=need)


@dataclass(frozen=True)
class PlanFit:
    fit: Fit
    fixes: Fixes
    batches_source: str  # where the widest captured batch comes from
    tiers_source: str  # the tuned record, the config file, or SGLang's default tiers


def plan_fit(ctx: Context) -> PlanFit | None:
    """The fit for a plan that runs PCIe-IPC (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1, SGLang's derivation: no
    SGLANG_PCIE_IPC_MAX_NUMEL) under --speculative-adaptive EAGLE/EAGLE3 with decode CUDA graphs; None otherwise,
    or when the tiers cannot be read or the start is not among them (rule `adaptive_config` refuses those)."""
    env, server = ctx.env, ctx.server
    if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")) != "1" or env.get("SGLANG_PCIE_IPC_MAX_NUMEL"):
        return None
    if server.get("speculative-adaptive") is not True or not ctx.cuda_graphs_on():
        return None
    if str(server.get("speculative-algorithm") or "").upper() not in ("EAGLE", "EAGLE3"):
        return None
    path = server.get("speculative-adaptive-config")
    if ctx.adaptive_tiers is not None:
        tiers, source = dict(ctx.adaptive_tiers), "the tuned tiers"
    elif path is None:
        tiers, source = DEFAULT_TIERS, "SGLang's default tiers (adaptive_spec_params.py:28-53)"
    elif isinstance(path, str) and path and not (path.startswith("<") and path.endswith(">")):
        read, _ = read_config(path)
        if read is None:
            return None
        tiers, source = read, f"the adaptive config {path}"
    else:
        return None
    union = sorted({s for steps in tiers.values() for s in steps})
    start = _as_int(server.get("speculative-num-steps"))
    if start is None:
        start = union[len(union) // 2]  # speculative_hook.py:1404-1409
    if start not in union:
        return None
    batches, batches_source = captured_batches(ctx)
    if not batches:
        return None
    router = router_batches(ctx)
    return PlanFit(fit(tiers, start, batches, router), fixes(tiers, start, batches, router), batches_source, source)
