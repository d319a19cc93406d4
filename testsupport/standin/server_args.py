"""Read the real ``sglang.launch_server`` command line; flags the stand-in does not model are ignored."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ServerArgs:
    """The subset of SGLang's server arguments that changes the stand-in's behaviour or reports."""

    model_path: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    enable_metrics: bool = False
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    max_running_requests: int | None = None
    ignored_args: list[str] = field(default_factory=list)

    @property
    def speculative(self) -> bool:
        """Any speculative algorithm (EAGLE3, NGRAM, ...) turns on verify-pass timing."""
        return bool(self.speculative_algorithm) and self.speculative_algorithm.upper() != "NONE"

    @property
    def eagle_point(self) -> tuple[int, int, int] | None:
        """(steps, topk, draft tokens) under EAGLE/EAGLE3 with all three given; None otherwise."""
        values = (self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens)
        if (self.speculative_algorithm or "").upper() not in ("EAGLE", "EAGLE3") or any(v is None for v in values):
            return None
        return values  # type: ignore[return-value]

    @property
    def resolved_max_running_requests(self) -> int | None:
        """/server_info's `max_running_requests`, as SGLang 0.5.23 resolves it: the flag when given, else 48 under
        a speculative algorithm that sets it (srt/arg_groups/speculative_hook.py:1086-1093 EAGLE/EAGLE3/
        STANDALONE/FROZEN_KV_MTP, :438-442 DFLASH, :852-856 DSPARK, :1294-1298 NGRAM; UNO sets none), else None."""
        if self.max_running_requests is not None:
            return self.max_running_requests
        algo = (self.speculative_algorithm or "").upper()
        return SPEC_RUNNING_CAP if algo in CAPPED_ALGORITHMS else None

    @property
    def running_cap(self) -> int:
        """The most requests the stand-in runs at once (SGLang's scheduler limit, reported per DP rank as
        internal_states' `effective_max_running_requests_per_dp`); the rest wait. Without the flag or speculation
        SGLang sizes it from the KV cache (kv_cache_configurator.py:3119-3132: 2048 to 4096, at most half the token
        capacity); the stand-in has no KV cache and takes 2048."""
        resolved = self.resolved_max_running_requests
        return resolved if resolved is not None else UNCAPPED_RUNNING

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


SPEC_RUNNING_CAP = 48
CAPPED_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP", "DFLASH", "DSPARK", "NGRAM")
UNCAPPED_RUNNING = 2048


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number of at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m testsupport.standin",
        description="SIMULATED SGLang stand-in: accepts sglang.launch_server arguments.",
        allow_abbrev=False,
    )
    p.add_argument("--model-path", "--model", dest="model_path", default="simulated-model")
    p.add_argument("--served-model-name", dest="served_model_name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument(
        "--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path"
    )
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--max-running-requests", type=_positive, default=None)
    return p


def parse_server_argv(argv: list[str]) -> ServerArgs:
    """Parse SGLang's argv; unknown flags are kept in ``ignored_args``. Bad values exit 2 (argparse)."""
    ns, unknown = _parser().parse_known_args(argv)
    served = ns.served_model_name or ns.model_path
    return ServerArgs(
        model_path=ns.model_path,
        served_model_name=served,
        host=ns.host,
        port=ns.port,
        tp_size=ns.tp_size,
        enable_metrics=ns.enable_metrics,
        speculative_algorithm=ns.speculative_algorithm,
        speculative_draft_model_path=ns.speculative_draft_model_path,
        speculative_num_steps=ns.speculative_num_steps,
        speculative_eagle_topk=ns.speculative_eagle_topk,
        speculative_num_draft_tokens=ns.speculative_num_draft_tokens,
        max_running_requests=ns.max_running_requests,
        ignored_args=list(unknown),
    )
