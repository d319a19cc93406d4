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
