"""Variables SGLang sets in its parent process, which a profile value replaces in every TP worker."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding

# What SGLang's parent process writes into its own environment before it spawns the TP workers
# (sglang/srt/entrypoints/engine.py, _set_envs_and_config, docs/evidence.md "Parent-set variables").
# The workers are fresh interpreters (spawn, engine.py:1995), so sitecustomize re-applies the profile
# in each of them: a profile value wins over SGLang's in every worker, where the kernels run.
PARENT_SET_ENV = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "always 8 (engine.py:1921)",
    "NCCL_GRAPH_MIXING_SUPPORT": "0 under --dcp-size > 1 when unset or under --enable-symm-mem (engine.py:1916-1920)",
    "NCCL_CUMEM_ENABLE": "0 when unset, 1 under --enable-symm-mem (engine.py:1898-1907)",
    "NCCL_NVLS_ENABLE": "0 when unset, 1 under --enable-nccl-nvls or --enable-symm-mem (engine.py:1908-1915)",
    "TRTLLM_ENABLE_PDL": "1 unless set to 0 (engine.py:1923-1925)",
}


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


# What SGLang's parent writes for deterministic inference, which its workers then read (docs/evidence.md
# "Deterministic inference"): the NCCL three only at TP > 1 on CUDA (attention_hook.py:667-701), the two
# SGLANG_* ones always under the flag (serving_hook.py:444-448). A worker unpickles arguments already
# resolved and never resolves them again (server_args.py:250-251, :498-506), so it gets these values only
# by inheriting the parent's environment, and a profile value, which sitecustomize applies in each
# worker, replaces them there.
DETERMINISTIC_NCCL_ENV = {
    "NCCL_ALGO": "allreduce:tree (attention_hook.py:676)",
    "NCCL_MIN_NCHANNELS": "channel count ($SGLANG_DETERMINISTIC_NCCL_NCHANNELS, default 8; attention_hook.py:696-698)",
    "NCCL_MAX_NCHANNELS": "channel count ($SGLANG_DETERMINISTIC_NCCL_NCHANNELS, default 8; attention_hook.py:696-698)",
}
DETERMINISTIC_SGLANG_ENV = {
    "SGLANG_ENABLE_DETERMINISTIC_INFERENCE": "1 (serving_hook.py:444-446)",
    "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0 (serving_hook.py:447-448)",
}
# The knob SGLang offers for the pinned channel count: read in the parent, after sitecustomize has applied
# the profile there, so a profile may set it (environ.py:1531).
DETERMINISTIC_CHANNELS_KNOB = "SGLANG_DETERMINISTIC_NCCL_NCHANNELS"


def _deterministic_flag(ctx: Context) -> str | None:
    """The flag that turns deterministic inference on: its own, or --rl-on-policy-target, which SGLang
    turns into it (attention_hook.py:586-597); None when neither is set."""
    if ctx.server.get("enable-deterministic-inference") is True:
        return "enable-deterministic-inference"
    if ctx.server.get("rl-on-policy-target") not in (None, "", False):
        return "rl-on-policy-target"
    return None


def _deterministic_owned(ctx: Context) -> dict[str, str]:
    """The variables SGLang writes for deterministic inference under this plan: no NCCL ones at TP 1,
    where it pins nothing (and no TP all-reduce runs)."""
    owned = dict(DETERMINISTIC_SGLANG_ENV)
    if ctx.tp_size() != 1:
        owned.update(DETERMINISTIC_NCCL_ENV)
    return owned


def deterministic_env_conflict(ctx: Context) -> Iterator[Finding]:
    """A profile value of a variable SGLang pins for deterministic inference wins in every TP worker,
    so the run would claim batch invariance it no longer has."""
    flag = _deterministic_flag(ctx)
    if flag is None:
        return
    source = ctx.origin(f"server.{flag}")
    where = f" (set in {source})" if source else ""
    for name, what in _deterministic_owned(ctx).items():
        if name not in ctx.env:
            continue
        knob = (f"; to pin another channel count set {DETERMINISTIC_CHANNELS_KNOB} in [env] instead"
                if name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS") else "")
        yield ctx.finding(
            "error",
            "deterministic_env_conflict",
            f"env.{name}",
            f"{name}={ctx.env[name]} replaces the {what} SGLang sets for --{flag}{where} in every TP worker "
            "(sitecustomize re-applies the profile in each), so the batch invariance the flag promises is gone; "
            f"remove {name} from [env] ({name} = false drops one inherited through extends){knob}, "
            f"or drop --{flag}",
        )
