"""AIPerf, NVIDIA's benchmark client, run fully offline against a local OpenAI-compatible chat endpoint: the outside
client `tests_outside/` holds `bench run --request-rate` against.

AIPerf 0.13.0 lives in a venv of its own (`make test-outside` builds `.venv-aiperf`; its pins, dash, datasets,
pyarrow, kubernetes-asyncio, have no place in the kit's). It is only ever run as a command, never imported.

Offline: AIPerf needs a HuggingFace tokenizer for its synthetic prompts. Under HF_HUB_OFFLINE it loads one only out of
the HuggingFace cache: a local folder given to `--tokenizer` is then taken for a repo id and refused ("HFValidationError:
Repo id must be in the form 'repo_name' or 'namespace/repo_name'", aiperf/common/tokenizer.py,
`_resolve_local_snapshot`), and `--tokenizer builtin` downloads tiktoken's o200k_base on first use. So
`tiny_tokenizer` writes a byte-level tokenizer (the 256 byte tokens, no merges, built with `tokenizers`, which AIPerf
brings) into a private cache under HF_HOME as `kit-test/tiny-bytes`, and AIPerf runs with HF_HUB_OFFLINE=1 and
TRANSFORMERS_OFFLINE=1. Token counts come from the server's `usage` (`--use-server-token-count`), not from that
tokenizer, so the inter-token latency divides by the tokens the server generated.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_ENV = "AIPERF_VENV"  # the venv AIPerf is installed in (default: .venv-aiperf in the checkout), as the Makefile
TOKENIZER_REPO = "kit-test/tiny-bytes"
REVISION = "0" * 40

_MAKE_TOKENIZER = """
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
out = Path(sys.argv[1])
vocab = {"[UNK]": 0}
for b in pre_tokenizers.ByteLevel.alphabet():
    vocab.setdefault(b, len(vocab))
tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps(
    {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1000000}))
"""


def venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or REPO / ".venv-aiperf")


def aiperf_command() -> Path:
    return venv() / "bin" / "aiperf"


def offline_env(hf_home: Path) -> dict[str, str]:
    """The environment AIPerf runs in: no HuggingFace Hub, a cache of its own."""
    return {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "COLUMNS": "200"}


def tiny_tokenizer(hf_home: Path) -> str:
    """Write the byte-level tokenizer into the HuggingFace cache under `hf_home`; its repo id for `--tokenizer`."""
    repo = hf_home / "hub" / f"models--{TOKENIZER_REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    subprocess.run([str(venv() / "bin" / "python"), "-c", _MAKE_TOKENIZER, str(snapshot)],
                   env=offline_env(hf_home), check=True, capture_output=True, text=True, timeout=120)
    return TOKENIZER_REPO


@dataclass(frozen=True)
class AIPerfRun:
    """What one `aiperf profile` measured (latencies in ms), out of its profile_export files."""

    completed: int
    request_throughput: float  # completed / benchmark_duration, AIPerf's own figure
    ttft_p50: float
    ttft_p99: float
    itl_p50: float  # per request: (latency - TTFT) / (output tokens - 1), what the kit calls TPOT
    latency_p50: float
    output_tokens_p50: float
    send_times_s: tuple[float, ...]  # each profiled request's start, seconds after the first

    @property
    def achieved_rate(self) -> float:
        """Requests sent per second between the first send and the last, as the kit's `achieved_rate`."""
        t = self.send_times_s
        return (len(t) - 1) / (t[-1] - t[0])


def read_run(artifacts: Path) -> AIPerfRun:
    """The numbers of an `aiperf profile` run out of its artifact folder."""
    summary = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    starts = []
    for line in (artifacts / "profile_export.jsonl").read_text().splitlines():
        meta = json.loads(line)["metadata"]
        if meta.get("benchmark_phase") == "profiling":
            starts.append(meta["request_start_ns"])
    starts.sort()
    return AIPerfRun(
        completed=int(summary["completed_request_count"]["avg"]),
        request_throughput=summary["request_throughput"]["avg"],
        ttft_p50=summary["time_to_first_token"]["p50"], ttft_p99=summary["time_to_first_token"]["p99"],
        itl_p50=summary["inter_token_latency"]["p50"], latency_p50=summary["request_latency"]["p50"],
        output_tokens_p50=summary["output_sequence_length"]["p50"],
        send_times_s=tuple((s - starts[0]) / 1e9 for s in starts),
    )


@dataclass(frozen=True)
class OpenLoad:
    """The open-loop load AIPerf sends: `count` requests at `rate` req/s with gamma gaps of shape `burstiness`
    (AIPerf's `--arrival-smoothness`, vLLM's burstiness), each generating exactly `output_tokens` tokens."""

    rate: float
    count: int
    burstiness: float
    output_tokens: int
    warmup: int = 0
    prompt_tokens: int = 64
    seed: int = 1


def profile(url: str, model: str, load: OpenLoad, artifacts: Path, hf_home: Path, timeout: float = 300) -> AIPerfRun:
    """Run `aiperf profile` against `url`'s /v1/chat/completions (streaming) and read what it measured; a failed
    run raises with the end of its output."""
    tokenizer = tiny_tokenizer(hf_home)
    argv = [str(aiperf_command()), "profile", "--model-names", model, "--url", url, "--endpoint-type", "chat",
            "--streaming", "--tokenizer", tokenizer, "--use-server-token-count",
            "--request-rate", f"{load.rate:g}", "--arrival-pattern", "gamma",
            "--arrival-smoothness", f"{load.burstiness:g}", "--request-count", str(load.count),
            "--prompt-input-tokens-mean", str(load.prompt_tokens), "--prompt-input-tokens-stddev", "0",
            "--prompt-output-tokens-mean", str(load.output_tokens), "--prompt-output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--random-seed", str(load.seed),
            "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", "--output-artifact-dir", str(artifacts)]
    if load.warmup:
        argv += ["--warmup-request-count", str(load.warmup)]
    run = subprocess.run(argv, env=offline_env(hf_home), capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"aiperf profile exited {run.returncode}:\n{(run.stdout + run.stderr)[-4000:]}")
    return read_run(artifacts)
