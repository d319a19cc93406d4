"""The CPU overlay: what real SGLang 0.5.23 needs to run any kit profile on this CPU-only machine.

It is a model overlay (launcher/profiles/loader.py: `model/<name>.toml` in a KIT_PROFILES_DIR folder,
chosen with MODEL_OVERLAY), so it is laid over the profile and its spec mode last, exactly like the
kit's own model overlays; the kit's profiles stay as they are. Each entry carries its reason, written
into the file as a comment, and so does each setting of the kit's that the real server refuses here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NAME = "cpu-real"
MISSING_NCCL = "/nonexistent/kit-test/libnccl.so.2"


@dataclass(frozen=True)
class Entry:
    key: str
    value: str | int | bool
    why: str


ENV = (
    Entry("SGLANG_USE_CPU_ENGINE", "1",
          "`--device cpu` takes the CPU platform only with it (sglang/srt/platforms/__init__.py:50)"),
    Entry("SGLANG_CPU_OMP_THREADS_BIND", "0|1",
          "one core per TP rank; without it numa_utils.py asserts world size <= NUMA nodes (1 here)"),
    Entry("SGLANG_NCCL_SO_PATH", MISSING_NCCL,
          "parallel_state.py enables pynccl for CPU and it crashes in pynccl.py; a library that fails "
          "to load disables it (pynccl.py:73-80) and the ranks reduce over gloo"),
)

SERVER = (
    Entry("device", "cpu", "no GPU on this machine"),
    Entry("tp-size", 2, "two ranks, two cores: the TP paths (env in every scheduler, gloo reductions) run for real"),
    Entry("max-total-tokens", 16384,
          "without it the KV pool takes 72% of host RAM and a minute to allocate"),
    Entry("cuda-graph-backend-decode", "disabled",
          "base.toml sets `full`; there is no CUDA here (`--disable-cuda-graph` is deprecated for this)"),
    Entry("cuda-graph-backend-prefill", "disabled", "no CUDA here"),
    Entry("enable-metrics", True, "base.toml has it already; the metrics tests need it whatever the profile"),
)


def toml_value(v: str | int | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(tp_size: int = 2) -> str:
    """The overlay file's text; `tp_size` 1 drops the TP-2-only variables."""
    lines = [
        "# Real SGLang 0.5.23 on a CPU-only test machine (testsupport/real/overlay.py writes this file).",
        f'description = "CPU test machine: --device cpu, TP {tp_size}, small KV pool, no CUDA graphs"',
        "",
        "[env]",
    ]
    for e in ENV:
        if tp_size == 1 and e.key == "SGLANG_CPU_OMP_THREADS_BIND":
            continue
        lines += [f"# {e.why}", f"{e.key} = {toml_value(e.value)}"]
    lines += ["", "[server]"]
    for e in SERVER:
        value = tp_size if e.key == "tp-size" else e.value
        lines += [f"# {e.why}", f"{e.key} = {toml_value(value)}"]
    return "\n".join(lines) + "\n"


def write(profiles_dir: Path, tp_size: int = 2) -> str:
    """Write `model/<NAME>.toml` under `profiles_dir`; the name to pass as MODEL_OVERLAY."""
    folder = Path(profiles_dir) / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{NAME}.toml").write_text(render(tp_size))
    return NAME
