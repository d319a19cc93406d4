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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


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
        ignored_args=list(unknown),
    )
