"""Speculative decoding is chosen by the spec overlay, never by a profile."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding
from launcher.profiles.tier_routing import read_config


def speculation_in_profile(ctx: Context) -> Iterator[Finding]:
    """Speculation is its own axis (--spec); a profile that sets it silently fights the overlay."""
    for key, path in ctx.resolved.origin.items():
        if key.startswith("server.speculative-") and path.parent.name != "spec":
            yield ctx.finding("warning", "speculation_in_profile", key, f"{key[7:]} belongs to the spec overlay; choose the mode with --spec instead")


def eagle_spec_params(ctx: Context) -> Iterator[Finding]:
    """EAGLE's (steps, top-k, draft tokens) against SGLang 0.5.23's own argument checks (its parser takes
    any int): sglang/srt/arg_groups/speculative_hook.py `_handle_eagle_family` and the draft tree's
    torch.topk (speculative/eagle_utils.py:110). docs/evidence.md, "EAGLE-3 speculation parameters"."""
    from launcher.profiles import spec_params

    server = ctx.server
    if not spec_params.is_eagle(server) or any(server.get(k) is None for k in spec_params.KEYS):
        return  # not EAGLE, or left to SGLang's auto-pick (speculative_hook.py:1159)
    values: dict[str, int] = {}
    for key in spec_params.KEYS:
        raw = server[key]
        if not (isinstance(raw, str) and raw.strip().isdigit() and 1 <= int(raw) <= spec_params.MAX_VALUE):
            yield ctx.finding("error", "eagle_spec_params", f"server.{key}",
                              f"{key} {raw!r}: must be a whole number from 1 to {spec_params.MAX_VALUE} (SGLang's parser takes any "
                              "int, its EAGLE worker needs at least one step, one candidate and one token)")
            return
        values[key] = int(raw)
    steps, topk, draft = (values[k] for k in spec_params.KEYS)
    point = f"EAGLE point (steps, topk, draft_tokens) = ({steps},{topk},{draft})"
    for problem in spec_params.point_problems(spec_params.SpecParams(steps=steps, topk=topk, draft_tokens=draft)):
        yield ctx.finding("error", "eagle_spec_params", "server.speculative-num-draft-tokens", f"EAGLE point {problem}")
    if topk > 1:
        backends = {str(server.get(k)) for k in ("attention-backend", "decode-attention-backend",
                                                 "prefill-attention-backend") if server.get(k) is not None}
        if "trtllm_mha" in backends:  # speculative_hook.py:1176-1180
            yield ctx.finding("error", "eagle_spec_params", "server.speculative-eagle-topk",
                              f"{point}: the trtllm_mha attention backend only supports top-k 1 (speculative_hook.py:1178)")
        if server.get("speculative-use-rejection-sampling") is True:  # speculative_hook.py:1221-1224
            yield ctx.finding("error", "eagle_spec_params", "server.speculative-eagle-topk",
                              f"{point}: --speculative-use-rejection-sampling requires top-k 1 (speculative_hook.py:1223)")
        page = server.get("page-size")
        backend = server.get("attention-backend")
        tree_backends = ("flashinfer", "fa3", "triton")  # speculative_hook.py:1271
        if (isinstance(page, str) and page.isdigit() and int(page) > 1 and backend is not None
                and backend not in tree_backends):
            yield ctx.finding("error", "eagle_spec_params", "server.speculative-eagle-topk",
                              f"{point}: top-k > 1 with page-size {page} needs attention backend "
                              f"{'/'.join(tree_backends)}, not {backend} (speculative_hook.py:1275)")


ADAPTIVE_SRC = "srt/speculative/adaptive_spec_params.py"
HOOK_SRC = "srt/arg_groups/speculative_hook.py"
# (server key, what SGLang says, where): each condition under which SGLang 0.5.23's
# adaptive_unsupported_reason (adaptive_spec_params.py:56-100) turns --speculative-adaptive off with a
# warning (speculative_hook.py:1374-1389) and the server runs the static point instead.
ADAPTIVE_UNSUPPORTED = (
    ("enable-dp-attention", "attention DP is not supported (adaptive tier decisions are not synchronized across "
     "DP ranks)", f"{ADAPTIVE_SRC}:80-84"),
    ("enable-multi-layer-eagle", "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not "
     "implement adaptive)", f"{ADAPTIVE_SRC}:85-89"),
    ("enable-two-batch-overlap", "enable_two_batch_overlap=True is not supported (adaptive state swap would discard "
     "the TboAttnBackend wrapper)", f"{ADAPTIVE_SRC}:90-94"),
    ("enable-pdmux", "enable_pdmux=True is not supported (adaptive state swap does not update "
     "decode_attn_backend_group)", f"{ADAPTIVE_SRC}:95-99"),
)
_FALLBACK = (f"SGLang would log 'speculative_adaptive disabled: ... Falling back to static speculative params.' "
             f"({HOOK_SRC}:1380-1384) and run the static point while the plan says adaptive")


def adaptive_fallback(ctx: Context) -> Iterator[Finding]:
    """--speculative-adaptive where SGLang 0.5.23 would silently run static speculation instead
    (adaptive_unsupported_reason, adaptive_spec_params.py:56-100): refused, not left to a log warning."""
    server = ctx.server
    if server.get("speculative-adaptive") is not True:
        return
    algo = str(server.get("speculative-algorithm") or "none")
    if algo.upper() not in ("EAGLE", "EAGLE3"):  # adaptive_spec_params.py:61-65
        yield ctx.finding("error", "adaptive_fallback", "server.speculative-adaptive",
                          f"speculative-adaptive with speculative-algorithm {algo}: only EAGLE/EAGLE3 adapt "
                          f"({ADAPTIVE_SRC}:61-65); {_FALLBACK}. Use spec mode eagle3-adaptive, or drop speculative-adaptive")
        return
    topk = server.get("speculative-eagle-topk")
    if topk is not None and str(topk).strip() != "1":  # adaptive_spec_params.py:75-79
        yield ctx.finding("error", "adaptive_fallback", "server.speculative-eagle-topk",
                          f"speculative-eagle-topk {topk} with speculative-adaptive: only top-k 1 adapts "
                          f"({ADAPTIVE_SRC}:75-79); {_FALLBACK}. Give top-k 1 (e.g. --spec-params 3,1,4), or "
                          "choose spec mode eagle3 for top-k above 1")
    for key, why, where in ADAPTIVE_UNSUPPORTED:
        if server.get(key) is True:
            yield ctx.finding("error", "adaptive_fallback", f"server.{key}",
                              f"{key} with speculative-adaptive: {why} ({where}); {_FALLBACK}. Drop {key}, or "
                              "choose spec mode eagle3 (static)")


def adaptive_config(ctx: Context) -> Iterator[Finding]:
    """The adaptive config SGLang 0.5.23 reads at start-up: a file it can load (adaptive_spec_params.py:103-139),
    whose candidate steps hold the starting steps (speculative_hook.py:1416-1421), and a log level that keeps
    the INFO line the activation verdict reads (adaptive_spec_params.py:298-303)."""
    server = ctx.server
    if server.get("speculative-adaptive") is not True:
        return
    path = server.get("speculative-adaptive-config")
    tiers = None
    if isinstance(path, str) and path.startswith("<") and path.endswith(">"):
        pass  # a `check` placeholder for an unset variable: nothing to read yet
    elif ctx.adaptive_tiers is not None:
        tiers = ctx.adaptive_tiers  # a tuned record, checked when it was made (launcher/profiles/adaptive_tiers.py)
    elif isinstance(path, str) and path:
        tiers, why = read_config(path)
        if tiers is None:
            yield ctx.finding("error", "adaptive_config", "server.speculative-adaptive-config",
                              f"adaptive config {path} {why}: SGLang would refuse to start "
                              f"({ADAPTIVE_SRC}:103-139); fix the file or name another")
    union = sorted({s for steps in (tiers or {}).values() for s in steps}) if tiers else \
        (sorted({0, 1, 3, 5, 7}) if path is None else None)  # SGLang's defaults without a file (:28-53)
    steps = server.get("speculative-num-steps")
    if union is not None and isinstance(steps, str) and steps.strip().isdigit() and int(steps) not in union:
        yield ctx.finding("error", "adaptive_config", "server.speculative-num-steps",
                          f"speculative-num-steps {steps} is not one of the adaptive config's candidate steps "
                          f"{union}: SGLang refuses to start ({HOOK_SRC}:1416-1421); start from one of them "
                          "(--spec-params S,1,S+1 with S a candidate step of at least 1)")
    level = server.get("log-level")
    if isinstance(level, str) and level.lower() in ("warning", "error", "critical"):
        yield ctx.finding("error", "adaptive_config", "server.log-level",
                          f"log-level {level} hides SGLang's INFO line 'AdaptiveSpeculativeParams initialized' "
                          f"({ADAPTIVE_SRC}:298-303) and its step changes (:266-270), which tell the kit adaptive "
                          "speculation runs: a switch to this plan would read it as fallen back; use info (the default)")
