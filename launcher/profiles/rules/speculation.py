"""Speculative decoding is chosen by the spec overlay, never by a profile."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


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
